// Building DOM nodes from data. Everything on-chain (endpoints, GPU models, CIDs) is text set with
// textContent, never parsed as HTML, so a provider cannot inject markup into the page.

/** An element with attributes and children (strings become text nodes; null and false are skipped). */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

/** Replace a node's children. */
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

/** A definition list entry for the `.figures` grids: a label and its value. */
export function figure(label, value, attrs = {}) {
  return h("div", attrs, h("dt", {}, label), h("dd", {}, value));
}

/** Show a message in a `role="alert"`/`role="status"` paragraph, or hide it when `text` is empty. */
export function say(node, text) {
  node.textContent = text ?? "";
  node.hidden = !text;
}

/** The page's script is running: hide the "not built" fallback. */
export function markLoaded() {
  for (const node of document.querySelectorAll("[data-hide-when-loaded]")) node.hidden = true;
}
