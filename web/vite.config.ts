// Vite config. The only custom part is a tiny gzip_static emulation so that `vite dev` and
// `vite preview` answer `traces/x.json` with `traces/x.json.gz` + Content-Encoding: gzip, the
// way deploy/nginx.conf does: the page then fetches the same URLs under both servers.
import type { Connect, Plugin } from "vite";
import { defineConfig } from "vitest/config";
import { existsSync, createReadStream } from "node:fs";
import { join, resolve } from "node:path";

function gzipStatic(rootOf: () => string): Connect.NextHandleFunction {
  return (req, res, next) => {
    const url = (req.url ?? "").split("?")[0];
    const accepts = /\bgzip\b/.test(String(req.headers["accept-encoding"] ?? ""));
    if (!url.endsWith(".json") || !accepts || url.includes("..")) return next();
    const gz = join(rootOf(), decodeURIComponent(url) + ".gz");
    if (!existsSync(gz)) return next();
    res.setHeader("Content-Type", "application/json");
    res.setHeader("Content-Encoding", "gzip");
    res.setHeader("Vary", "Accept-Encoding");
    createReadStream(gz).pipe(res);
  };
}

function gzipStaticPlugin(): Plugin {
  let outDir = "dist";
  return {
    name: "monolith-gzip-static",
    configResolved(c) { outDir = resolve(c.root, c.build.outDir); },
    configureServer(s) { s.middlewares.use(gzipStatic(() => resolve(s.config.root, "public"))); },
    configurePreviewServer(s) { s.middlewares.use(gzipStatic(() => outDir)); },
  };
}

export default defineConfig({
  base: "./", // relative URLs: the page works from any path prefix
  plugins: [gzipStaticPlugin()],
  build: { target: "es2022", chunkSizeWarningLimit: 200 },
  test: { include: ["tests/unit/**/*.test.ts"], environment: "node" },
});
