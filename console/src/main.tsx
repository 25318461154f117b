import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { ProblemError } from "./api/client";
import { App } from "./App";
import "./styles.css";

const queries = new QueryClient({
  defaultOptions: {
    queries: {
      // The service's own refusals are answers, not glitches: only a lost connection retries.
      retry: (count, error) => !(error instanceof ProblemError) && count < 2,
      // A page shows what is cached at once and asks again whenever it is opened: the fleet
      // changes behind the page (agents check in, colleagues decide).
      refetchOnWindowFocus: false,
      staleTime: 0,
    },
  },
});

const root = document.getElementById("root");
if (root) {
  createRoot(root).render(
    <StrictMode>
      <QueryClientProvider client={queries}>
        <App />
      </QueryClientProvider>
    </StrictMode>,
  );
}
