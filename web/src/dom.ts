// Tiny DOM helpers (no framework).
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K, attrs: Record<string, string> = {}, ...kids: (Node | string | null | undefined)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    // Styles through the CSSOM, never as a style attribute: the deployed page's Content-Security-Policy
    // (style-src 'self', deploy/nginx.conf) refuses inline style attributes.
    else if (k === "style") for (const decl of v.split(";")) {
      const i = decl.indexOf(":");
      if (i > 0) el.style.setProperty(decl.slice(0, i).trim(), decl.slice(i + 1).trim());
    }
    else el.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) el.append(k);
  return el;
}

export const $ = <T extends Element = HTMLElement>(sel: string, root: ParentNode = document): T => {
  const el = root.querySelector<T>(sel);
  if (!el) throw new Error(`page is missing ${sel}`);
  return el;
};

/** Number formatting with a fixed count of significant digits, thousands separated. */
export function fmt(x: number | null | undefined, sig = 3): string {
  if (x == null || !Number.isFinite(x)) return "—";
  const a = Math.abs(x);
  if (a >= 10 ** sig) return Math.round(x).toLocaleString("en-US");
  return Number(x.toPrecision(sig)).toLocaleString("en-US", { maximumSignificantDigits: sig });
}

export function fmtBytes(b: number | null | undefined): string {
  if (b == null || !Number.isFinite(b)) return "—";
  if (b >= 1e9) return `${fmt(b / 1e9)} GB`;
  if (b >= 1e6) return `${fmt(b / 1e6)} MB`;
  if (b >= 1e3) return `${fmt(b / 1e3)} KB`;
  return `${b} B`;
}
