// The gateway's JSON API, from pages it serves itself (same origin).

/** An API error that carries the gateway's own message (`detail`) and status. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

/** GET a path of the gateway (relative to its root) as JSON. */
export async function get(path) {
  const response = await fetch(new URL(path, apiRoot()), { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const detail = typeof body?.detail === "string" ? body.detail : `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, detail);
  }
  return body;
}

/** Every row of a paginated list. */
export async function getAll(path, pageSize = 200) {
  const rows = [];
  for (let offset = 0; ; offset += pageSize) {
    const sep = path.includes("?") ? "&" : "?";
    const page = await get(`${path}${sep}limit=${pageSize}&offset=${offset}`);
    rows.push(...page);
    if (page.length < pageSize) return rows;
  }
}

/** The pages live under /ui/<page>/, the API at the root. */
function apiRoot() {
  const ui = location.pathname.indexOf("/ui/");
  return location.origin + (ui >= 0 ? location.pathname.slice(0, ui + 1) : "/");
}
