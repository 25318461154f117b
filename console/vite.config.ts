// The console's build: one HTML file and hashed assets under dist/assets, no inline script
// (the api serves it under a Content-Security-Policy without 'unsafe-inline'), no source maps.
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

export default defineConfig({
  plugins: [react()],
  build: {
    outDir: "dist",
    emptyOutDir: true,
    sourcemap: false,
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    reportCompressedSize: true,
  },
  server: {
    // `npm run dev` beside `cargo run -p api`.
    proxy: { "/v1": "http://127.0.0.1:8080" },
  },
});
