// `npm run build`: the gateway's pages into dist/ (built on every machine, never committed). The
// explorer's and the staking page's scripts are bundled with viem by esbuild; the API reference at
// /docs uses Swagger UI's own bundle and stylesheet, copied from the pinned npm package so the page
// loads nothing from another site.
import { copyFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const web = dirname(fileURLToPath(import.meta.url));
const dist = join(web, "dist");

await build({
  entryPoints: [join(web, "src/explorer.js"), join(web, "src/stake.js")],
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  outdir: dist,
  logLevel: "warning",
});

// Served at /ui/dist/swagger-ui/ (marketplace/gateway/web/__init__.py), with the licence texts its
// Apache-2.0 licence asks a redistribution to carry.
const SWAGGER_UI_FILES = ["swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png",
  "swagger-ui-bundle.js.LICENSE.txt", "LICENSE", "NOTICE"];
const swaggerUi = dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/package.json"));
mkdirSync(join(dist, "swagger-ui"), { recursive: true });
for (const file of SWAGGER_UI_FILES) copyFileSync(join(swaggerUi, file), join(dist, "swagger-ui", file));
