// The settlement explorer: jobs, their escrow, auctions, pay, fees and refunds; providers and
// slashes; the treasury; the models and datasets of the registry. Every figure comes from the gateway's index and is reconciled on the
// page (escrow = payouts + fee + refund per job; the indexed treasury against the chain's own
// balance at the same block). The page polls the API every two seconds and redraws only when the
// indexer has read a new block, so it follows a running job live at little cost.
import { ApiError, get, getAll } from "./lib/api.js";
import { fill, figure, h, markLoaded, say } from "./lib/dom.js";
import { percent, short, when, zen, zenShort } from "./lib/format.js";

const POLL_MS = 2000;
const JOBS_SHOWN = 25;
const UNFINISHED = ["open", "running", "completed"];

const $ = (selector) => document.querySelector(selector);
const state = {
  config: null, // /chain/config, once
  indexedBlock: undefined, // the block the shown figures are read at
  details: new Map(), // job id -> { job, units }; settled and cancelled jobs do not change
  slashedTotal: null, // re-read provider details only when the network's slashes change
  slashes: [], // newest first
  slashesByProvider: new Map(), // address -> its slashes
};

// --- links -----------------------------------------------------------------------------------

const txLink = (hash) => h("a", { href: `#tx/${hash}`, class: "mono", title: hash }, short(hash));
const blockLink = (number) => h("a", { href: `#block/${number}` }, `block ${number}`);
const jobLink = (id) => h("a", { href: `#job/${id}` }, `#${id}`);
const account = (address) => h("span", { class: "mono", title: address }, short(address));
// An amount to 6 decimals (marked ≈ where rounded); hovering shows it to the wei.
function amount(wei) {
  const { text, exact } = zenShort(wei);
  return h("span", { "data-wei": String(wei), title: `${zen(wei)} ZEN`, class: exact ? "amount" : "amount rounded" }, text);
}
const cell = (content, attrs = {}) => h("td", attrs, content);
const num = (wei, attrs = {}) => cell(wei === null || wei === undefined ? "—" : amount(wei), { class: "num", ...attrs });
const where = (row) => [txLink(row.tx_hash), " in ", blockLink(row.block_number)];

function check(ok, okText, offText) {
  return h("span", { class: ok ? "check ok" : "check off" }, ok ? `✓ ${okText}` : `✗ ${offText}`);
}

function tierName(tier) {
  return state.config?.tiers[tier]?.name ?? `tier ${tier}`;
}

// --- figures of one job -----------------------------------------------------------------------

/** What a job has paid, charged and refunded so far, and whether its escrow adds up. */
function money(job, units) {
  const s = job.settlement;
  if (s && !s.cancelled) {
    const payment = BigInt(s.payment), fee = BigInt(s.fee), refund = BigInt(s.refund);
    const payouts = payment - fee;
    return { paid: payment, fee, payouts, refund, gap: BigInt(job.budget) - (payouts + fee + refund) };
  }
  if (s && s.cancelled) {
    const refund = BigInt(s.refund);
    return { paid: 0n, fee: 0n, payouts: 0n, refund, gap: BigInt(job.budget) - refund };
  }
  // Still running: pay accrued by the committed units (a confirmed dispute may yet take some back).
  const accrued = (units ?? []).reduce((sum, u) => sum + BigInt(u.amount), 0n);
  return { paid: accrued, fee: null, payouts: null, refund: null, gap: null };
}

function reconciliation(job, m) {
  if (m.gap === null) return h("span", { class: "muted" }, "when settled");
  return check(m.gap === 0n, "escrow = payouts + fee + refund", `escrow differs from payouts + fee + refund by ${zen(m.gap)} ZEN`);
}

function bidsSummary(job) {
  const sealed = job.bids.filter((b) => b.commitment !== null).length;
  const revealed = job.bids.filter((b) => b.price !== null).length;
  return `${sealed} sealed, ${revealed} revealed`;
}

function jobRow({ job, units }) {
  const m = money(job, units);
  const last = job.settlement ?? job;
  return h("tr", { "data-job": job.job_id, class: location.hash === `#job/${job.job_id}` ? "selected" : null },
    cell(jobLink(job.job_id)),
    cell(h("span", { class: `status ${job.status}` }, job.status)),
    num(job.budget, { "data-field": "escrow" }),
    cell(bidsSummary(job)),
    num(job.clearing_price, { "data-field": "clearing-price" }),
    num(m.paid, { "data-field": "paid", title: job.settlement ? "paid for accepted work, fee included" : "accrued so far" }),
    num(m.fee, { "data-field": "fee" }),
    num(m.payouts, { "data-field": "payouts" }),
    num(m.refund, { "data-field": "refund" }),
    cell(reconciliation(job, m), { "data-field": "check" }),
    cell(where(last)),
  );
}

// --- one job in full ----------------------------------------------------------------------------

function table(caption, headers, rows) {
  return h("div", { class: "scroll" }, h("table", {},
    h("caption", { class: "muted" }, caption),
    h("thead", {}, h("tr", {}, headers.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: headers.length, class: "empty" }, "none yet")))));
}

function verdicts(unit) {
  const shown = unit.results.length
    ? unit.results.map((r) => `${r.kind}${r.passed === null ? "" : r.passed ? " ✓" : " ✗"}`).join(", ")
    : "not sampled or not yet checked";
  return unit.void ? `void (rolled back); ${shown}` : shown;
}

function renderJob({ job, units }) {
  const m = money(job, units);
  const s = job.settlement;
  const fee = state.config?.fee_bps;
  const settlement = s ? [
    h("h3", {}, s.cancelled ? "Cancelled" : "Settlement"),
    h("dl", { class: "figures" },
      figure("Escrow", amount(job.budget)),
      figure("Paid (fee included)", amount(m.paid)),
      figure(`Fee${fee ? ` (${percent(fee, 10000)} of each provider's pay)` : ""}`, [amount(m.fee), ` — ${percent(m.fee, m.paid)} of paid`]),
      figure("Verifiers' share of the fee", amount(s.verifier_pool)),
      figure("Fee to the treasury", amount(m.fee - BigInt(s.verifier_pool))),
      figure("Paid to providers", amount(m.payouts)),
      figure("Refunded to the user", amount(m.refund)),
      figure("Reconciles", reconciliation(job, m)),
      figure("Transaction", where(s))),
  ] : [h("p", {}, "Accrued so far: ", amount(m.paid), ` ZEN for ${units.length} committed unit(s).`)];

  fill($("#job"),
    h("h2", { id: "job-title" }, `Job ${job.job_id}`),
    h("dl", { class: "figures" },
      figure("Status", job.status),
      figure("User", h("span", { class: "mono" }, job.user)),
      figure("Spec", h("span", { class: "mono" }, job.spec_cid)),
      figure("Tier", tierName(job.tier)),
      figure("Nodes × units", `${job.nodes} × ${job.units_per_node}`),
      figure("A unit is worth", `${job.unit_gpu_seconds} reference GPU-seconds`),
      figure("Max price per GPU-hour", amount(job.max_price)),
      figure("Clearing price per GPU-hour", job.clearing_price === null ? "not cleared" : amount(job.clearing_price)),
      figure("Collateral per slot", amount(job.collateral)),
      figure("Created", where(job))),
    ...settlement,
    table("Bids: sealed commitments, then reveals", ["Provider", "Kind", "Price per GPU-hour", "Transaction"],
      job.bids.map((b) => h("tr", {}, cell(account(b.provider)), cell(b.price === null ? "sealed" : "revealed"),
        num(b.price), cell(where(b))))),
    table("Slots", ["Slot", "Provider", "Price", "Event", "Transaction"],
      job.slots.map((s) => h("tr", {}, cell(String(s.slot)), cell(account(s.provider)), num(s.price),
        cell(s.removed_reason ? `removed: ${s.removed_reason}` : "assigned"), cell(where(s))))),
    table("Committed units", ["Slot", "Unit", "GPU-seconds", "Pay", "Checkpoint", "Verification", "Transaction"],
      units.map((u) => h("tr", {}, cell(String(u.slot)), cell(String(u.index)), cell(String(u.gpu_seconds), { class: "num" }),
        num(u.amount), cell(h("span", { class: "mono", title: u.cid }, short(u.cid))), cell(verdicts(u)), cell(where(u))))),
    h("p", {}, h("a", { href: "#" }, "Close")),
  );
  $("#job").hidden = false;
}

// --- providers and slashes ----------------------------------------------------------------------

function providerRow(p) {
  const slashed = p.slashes ? p.slashes.reduce((sum, s) => sum + BigInt(s.amount), 0n) : null;
  return h("tr", {},
    cell(h("span", { class: "mono" }, p.address)),
    cell(tierName(p.tier)),
    cell(`${p.gpus} × ${p.gpu_model}`),
    num(p.staked), num(p.locked), num(p.unbonding), num(slashed),
    cell(where(p)));
}

function slashRow(s) {
  return h("tr", {},
    cell(account(s.account)), cell(s.reason), num(s.amount),
    cell(account(s.reporter)), num(s.reporter_share), cell(where(s)));
}

// --- network --------------------------------------------------------------------------------------

function renderNetwork(stats, openEscrow, holdings) {
  const escrowed = BigInt(stats.escrowed), paid = BigInt(stats.paid), refunded = BigInt(stats.refunded);
  const counts = Object.entries(stats.jobs).map(([status, n]) => `${n} ${status}`).join(", ") || "none";
  const treasury = BigInt(stats.treasury_balance);
  fill($("#network"),
    figure("Jobs", counts),
    figure("Escrowed, all jobs", amount(escrowed)),
    figure("Paid (fees included)", amount(stats.paid)),
    figure("Fees", amount(stats.fees)),
    figure("Refunded", amount(stats.refunded)),
    figure("Still in escrow (unfinished jobs)", amount(openEscrow)),
    figure("Slashed", amount(stats.slashed)),
    figure("Treasury (indexed)", amount(treasury), { "data-field": "treasury" }),
    figure("Treasury (on chain)", holdings ? amount(holdings.zen.Treasury) : "the chain does not answer"),
    figure("Held by the job market (on chain)", holdings ? amount(holdings.zen.JobMarket) : "—"),
    figure("Providers", String(stats.providers)));
  const gap = escrowed - (paid + refunded + openEscrow);
  const parts = [check(gap === 0n, "every escrowed ZEN is paid, refunded or still in escrow",
    `escrow differs from paid + refunded + open escrow by ${zen(gap)} ZEN`)];
  if (holdings) {
    const chainTreasury = BigInt(holdings.zen.Treasury);
    parts.push(" · ", check(chainTreasury === treasury, `treasury matches the chain at block ${holdings.block_number}`,
      `the indexed treasury differs from the chain's by ${zen(chainTreasury - treasury)} ZEN at block ${holdings.block_number}`));
  }
  fill($("#network-check"), parts);
}

// --- the model and dataset registry -------------------------------------------------------------

function registryRow(entry) {
  const v = entry.latest;
  return h("tr", { "data-name": `${entry.kind}:${entry.name}` },
    cell(entry.kind),
    cell(h("span", { class: "mono" }, entry.name)),
    cell(account(entry.owner)),
    cell(String(entry.versions), { class: "num" }),
    cell(h("span", { class: "mono", title: v.cid }, short(v.cid))),
    cell(v.license),
    cell(v.parent ? h("span", { class: "mono" }, v.parent) : "—"),
    cell(v.job_id === null ? "—" : jobLink(v.job_id)),
    cell(where(v)));
}

async function registryEntries() {
  const [models, datasets] = await Promise.all([getAll("registry/models"), getAll("registry/datasets")]);
  return [...models, ...datasets];
}

// --- polling ----------------------------------------------------------------------------------------

async function jobDetail(summary) {
  const cached = state.details.get(summary.job_id);
  if (cached && (cached.job.status === "settled" || cached.job.status === "cancelled")) return cached;
  const [job, units] = await Promise.all([get(`jobs/${summary.job_id}`), get(`jobs/${summary.job_id}/units?limit=200`)]);
  const detail = { job, units };
  state.details.set(job.job_id, detail);
  return detail;
}

async function providersWithSlashes(stats) {
  const providers = await getAll("providers");
  if (stats.slashed !== state.slashedTotal) {
    const details = await Promise.all(providers.map((p) => get(`providers/${p.address}`)));
    state.slashes = details.flatMap((d) => d.slashes).sort((a, b) => b.block_number - a.block_number);
    state.slashesByProvider = new Map(details.map((d) => [d.address, d.slashes]));
    state.slashedTotal = stats.slashed;
  }
  return providers.map((p) => ({ ...p, slashes: state.slashesByProvider.get(p.address) ?? [] }));
}

async function refresh() {
  const stats = await get("stats");
  if (stats.indexed_block === state.indexedBlock) return false;
  const [recent, unfinished, providers, holdings, registry] = await Promise.all([
    get(`jobs?limit=${JOBS_SHOWN}`),
    Promise.all(UNFINISHED.map((status) => getAll(`jobs?status=${status}`))),
    providersWithSlashes(stats),
    stats.indexed_block === null ? null : get(`chain/holdings?block=${stats.indexed_block}`).catch(() => null),
    registryEntries(),
  ]);
  const shown = await Promise.all(recent.map(jobDetail));
  const openEscrow = unfinished.flat().reduce((sum, j) => sum + BigInt(j.budget), 0n);

  renderNetwork(stats, openEscrow, holdings);
  const jobRows = shown.map(jobRow);
  fill($("#jobs tbody"), jobRows.length ? jobRows : h("tr", {}, h("td", { colspan: 11, class: "empty" }, "no jobs yet")));
  fill($("#providers tbody"), providers.length ? providers.map(providerRow) : h("tr", {}, h("td", { colspan: 8, class: "empty" }, "no providers yet")));
  fill($("#slashes tbody"), state.slashes.length ? state.slashes.map(slashRow) : h("tr", {}, h("td", { colspan: 6, class: "empty" }, "no slashes")));
  fill($("#registry tbody"), registry.length ? registry.map(registryRow) : h("tr", {}, h("td", { colspan: 9, class: "empty" }, "nothing published yet")));
  await showSelectedJob();
  state.indexedBlock = stats.indexed_block;
  return true;
}

async function poll() {
  try {
    await refresh();
    say($("#problem"), "");
    const block = state.indexedBlock === null ? "nothing indexed yet" : `indexed to block ${state.indexedBlock}`;
    $("#live").textContent = `Live: ${block}; checked ${new Date().toLocaleTimeString()}.`;
  } catch (error) {
    say($("#problem"), `Cannot read the gateway: ${error.message}. Retrying every ${POLL_MS / 1000} s.`);
  }
  setTimeout(poll, POLL_MS);
}

// --- #job/N, #tx/HASH and #block/N ----------------------------------------------------------------

async function showSelectedJob() {
  const match = location.hash.match(/^#job\/(\d+)$/);
  for (const row of document.querySelectorAll("#jobs tr[data-job]")) {
    row.classList.toggle("selected", match !== null && row.dataset.job === match[1]);
  }
  if (!match) {
    $("#job").hidden = true;
    return;
  }
  const id = Number(match[1]);
  try {
    renderJob(state.details.get(id) ?? (await jobDetail({ job_id: id })));
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) throw error;
    fill($("#job"), h("h2", { id: "job-title" }, `Job ${id}`), h("p", {}, `${error.message}: not created yet, or not indexed yet.`),
      h("p", {}, h("a", { href: "#" }, "Close")));
    $("#job").hidden = false;
  }
}

function renderTx(tx) {
  return [
    h("h2", { id: "view-title" }, "Transaction"),
    h("dl", { class: "figures" },
      figure("Hash", h("span", { class: "mono" }, tx.hash)),
      figure("Status", tx.status),
      figure("Block", tx.block_number === null ? "pending" : blockLink(tx.block_number)),
      figure("From", h("span", { class: "mono" }, tx.sender)),
      figure("To", tx.to === null ? "contract creation" : [tx.contract ? `${tx.contract} ` : "", h("span", { class: "mono" }, tx.to)]),
      figure("Call", tx.method ? `${tx.method}(${Object.keys(tx.args).join(", ")})` : "—"),
      figure("Gas used", tx.gas_used === null ? "—" : String(tx.gas_used))),
    table("Call arguments", ["Name", "Value"],
      Object.entries(tx.args).map(([k, v]) => h("tr", {}, cell(k), cell(h("span", { class: "mono" }, JSON.stringify(v)))))),
    table("Events", ["#", "Contract", "Event", "Arguments"],
      tx.logs.map((log) => h("tr", {}, cell(String(log.log_index)), cell(log.contract ?? account(log.address)),
        cell(log.event ?? "unknown"),
        cell(h("span", { class: "mono" }, Object.entries(log.args).map(([k, v]) => `${k}=${v}`).join(" ")))))),
  ];
}

function renderBlock(block) {
  return [
    h("h2", { id: "view-title" }, `Block ${block.number}`),
    h("dl", { class: "figures" },
      figure("Hash", h("span", { class: "mono" }, block.hash)),
      figure("Time", when(block.timestamp)),
      figure("Gas used", String(block.gas_used)),
      figure("Parent", block.number > 0 ? blockLink(block.number - 1) : "genesis")),
    table("Transactions", ["Hash"], block.transactions.map((t) => h("tr", {}, cell(txLink(t))))),
  ];
}

async function route() {
  const view = $("#view");
  const tx = location.hash.match(/^#tx\/(0x[0-9a-fA-F]{64})$/);
  const block = location.hash.match(/^#block\/(\d+)$/);
  if (!tx && !block) {
    view.hidden = true;
    await showSelectedJob().catch((error) => say($("#problem"), error.message));
    if (location.hash.startsWith("#job/")) {
      $("#job").focus({ preventScroll: true });
      $("#job").scrollIntoView();
    }
    return;
  }
  try {
    const content = tx ? renderTx(await get(`chain/tx/${tx[1]}`)) : renderBlock(await get(`chain/blocks/${block[1]}`));
    fill(view, ...content, h("p", {}, h("a", { href: "#" }, "Close")));
  } catch (error) {
    fill(view, h("h2", { id: "view-title" }, tx ? "Transaction" : "Block"), h("p", { class: "problem" }, error.message),
      h("p", {}, h("a", { href: "#" }, "Close")));
  }
  view.hidden = false;
  view.focus();
  view.scrollIntoView();
}

async function start() {
  markLoaded();
  window.addEventListener("hashchange", route);
  state.config = await get("chain/config").catch(() => null); // tier names and the fee rate; optional
  await poll();
  if (location.hash) await route();
}

start();
