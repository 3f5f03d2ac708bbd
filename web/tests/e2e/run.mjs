// Browser tests, twice: against `vite preview` and against Debian's nginx on loopback running
// deploy/nginx.conf (rewritten to serve dist/ on a free 127.0.0.1 port from a temp prefix).
// Each run is `node --test tests/e2e/page.test.mjs` with BASE_URL and SERVER set.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync, existsSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const WEB = resolve(import.meta.dirname, "../..");
const DIST = join(WEB, "dist");
const NGINX = process.env.NGINX ?? "/usr/sbin/nginx";

const freePort = () => new Promise((ok, bad) => {
  const s = createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => ok(p)); }).on("error", bad);
});

async function waitUp(url, proc, what) {
  for (let i = 0; i < 100; i++) {
    if (proc.exitCode !== null) throw new Error(`${what} exited with ${proc.exitCode}`);
    try { if ((await fetch(url)).ok) return; } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what} did not answer at ${url}`);
}

function suite(base, server) {
  const r = spawnSync(process.execPath, ["--test", "--test-reporter=spec", "tests/e2e/page.test.mjs"],
    { cwd: WEB, stdio: "inherit", env: { ...process.env, BASE_URL: base, SERVER: server } });
  return r.status === 0;
}

/** deploy/nginx.conf is a server block for the image's conf.d; wrap it in a main config. */
export function nginxConfig(serverBlock, prefix, port, root) {
  let s = serverBlock;
  const listen = /^\s*listen\s+\d+\s*;\s*$/m, rootRe = /^\s*root\s+\/usr\/share\/nginx\/html\s*;\s*$/m;
  if (!listen.test(s) || !rootRe.test(s)) throw new Error("deploy/nginx.conf: expected a `listen PORT;` line and a `root /usr/share/nginx/html;` line");
  s = s.replace(listen, `    listen 127.0.0.1:${port};`).replace(rootRe, `    root ${root};`);
  return `daemon off;\nworker_processes 1;\npid ${prefix}/nginx.pid;\nerror_log ${prefix}/error.log warn;\n`
    + `events { worker_connections 256; }\nhttp {\n  include /etc/nginx/mime.types;\n  default_type application/octet-stream;\n`
    + `  access_log ${prefix}/access.log;\n  sendfile on;\n`
    + ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map((t) => `  ${t}_temp_path ${prefix}/${t};\n`).join("")
    + s + "\n}\n";
}

async function main() {
  if (!existsSync(join(DIST, "index.html"))) throw new Error("dist/ is missing: run `vite build` first");
  let ok = true;
  // 1. vite preview
  {
    const port = await freePort();
    const p = spawn(join(WEB, "node_modules/.bin/vite"), ["preview", "--host", "127.0.0.1", "--port", String(port), "--strictPort", "--bypass-lock"], { cwd: WEB, stdio: "ignore" });
    try { await waitUp(`http://127.0.0.1:${port}/`, p, "vite preview"); ok = suite(`http://127.0.0.1:${port}/`, "preview") && ok; }
    finally { p.kill(); }
  }
  // 2. nginx with deploy/nginx.conf
  {
    const port = await freePort();
    const prefix = mkdtempSync(join(tmpdir(), "monolith-nginx-"));
    for (const t of ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"]) mkdirSync(join(prefix, t));
    const conf = join(prefix, "nginx.conf");
    writeFileSync(conf, nginxConfig(readFileSync(join(WEB, "../deploy/nginx.conf"), "utf8"), prefix, port, DIST));
    const check = spawnSync(NGINX, ["-t", "-p", prefix, "-c", conf], { encoding: "utf8" });
    if (check.status !== 0) throw new Error(`nginx -t failed:\n${check.stderr}`);
    const p = spawn(NGINX, ["-p", prefix, "-c", conf], { stdio: "inherit" });
    try { await waitUp(`http://127.0.0.1:${port}/`, p, "nginx"); ok = suite(`http://127.0.0.1:${port}/`, "nginx") && ok; }
    finally {
      p.kill("SIGQUIT");
      await new Promise((r) => (p.exitCode !== null ? r() : p.on("exit", r)));
      rmSync(prefix, { recursive: true, force: true });
    }
  }
  process.exit(ok ? 0 : 1);
}

if (process.argv[1] === import.meta.filename) main().catch((e) => { console.error(e); process.exit(1); });
