// Code tour: excerpts cut from kernel/ at export time between `// tour:begin X` / `// tour:end X`.
import { h } from "./dom";
import type { Manifest } from "./manifest";

export function mountTour(root: HTMLElement, m: Manifest): void {
  root.replaceChildren(h("h2", { text: "Code tour" }));
  if (!m.tour.length) { root.append(h("p", { class: "empty", text: "No tour entries in the manifest." })); return; }
  for (const e of m.tour) {
    const where = e.file ? `${e.file}${e.line_start ? `:${e.line_start}–${e.line_end}` : ""}` : "";
    const art = h("article", { class: "tour" }, h("h3", { text: e.title }), h("p", { text: e.why }));
    if (e.missing || !e.code) art.append(h("p", { class: "empty", text: e.note ?? "excerpt not available" }));
    else art.append(h("p", { class: "where" }, h("code", { text: where })), h("pre", { class: "code" }, h("code", { text: e.code })));
    root.append(art);
  }
}
