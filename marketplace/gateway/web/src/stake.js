// The staking page: a provider connects an EIP-1193 wallet, sees its ZEN and stake, and stakes
// (an ERC-2612 permit signed with eth_signTypedData_v4, then stakeWithPermit: one transaction),
// requests an unstake or withdraws unbonded stake. The gateway only says where the ledger is
// (/chain/config); reads and transactions go through the wallet, which holds the key.
import { createPublicClient, createWalletClient, custom, defineChain, parseSignature, parseUnits } from "viem";
import { get } from "./lib/api.js";
import { figure, fill, h, markLoaded, say } from "./lib/dom.js";
import { DECIMALS, when, zen } from "./lib/format.js";
import { explain, WalletProblem } from "./lib/wallet-errors.js";

const PERMIT_TTL = 3600n; // seconds a permit stays valid
const ROLES = ["Not registered", "Provider", "Verifier"];
const PERMIT_TYPES = {
  Permit: [
    { name: "owner", type: "address" }, { name: "spender", type: "address" },
    { name: "value", type: "uint256" }, { name: "nonce", type: "uint256" }, { name: "deadline", type: "uint256" },
  ],
};

const $ = (selector) => document.querySelector(selector);
const page = { config: null, chain: null, reader: null, signer: null, address: null, zenAbi: null, stakingAbi: null, account: null };

// --- wallet and chain -----------------------------------------------------------------------------

async function connect() {
  const [address] = await page.signer.requestAddresses();
  if (!address) throw new WalletProblem("Your wallet shared no account: unlock it and connect again.");
  page.address = address;
  await refresh();
}

/** Null when the wallet is on the ledger's chain, else the plain-words problem. */
async function chainProblem() {
  const walletChain = Number(await window.ethereum.request({ method: "eth_chainId" }));
  if (walletChain === page.config.chain_id) return null;
  return `Your wallet is on chain ${walletChain}, but this ledger runs on chain ${page.config.chain_id}. ` +
    `Switch your wallet to chain ${page.config.chain_id} to see and move your stake.`;
}

async function switchChain() {
  try {
    await page.signer.switchChain({ id: page.config.chain_id });
  } catch (error) {
    if (error?.code === 4902 || error?.cause?.code === 4902) {
      throw new WalletProblem(`Your wallet does not know chain ${page.config.chain_id}: add it in the wallet ` +
        "with the RPC URL your operator gives (on a devnet: `zoo-compute devnet status`).");
    }
    throw error;
  }
  await refresh();
}

// --- reading the account ---------------------------------------------------------------------------

const read = (contract, functionName, args = []) => page.reader.readContract({
  address: page.config.addresses[contract], abi: contract === "ZenToken" ? page.zenAbi : page.stakingAbi, functionName, args,
});

async function loadAccount() {
  const [balance, account, now] = await Promise.all([
    read("ZenToken", "balanceOf", [page.address]),
    read("Staking", "account", [page.address]),
    page.reader.getBlock().then((b) => b.timestamp),
  ]);
  return { balance, ...account, now };
}

function renderAccount(a) {
  const tier = page.config.tiers[a.tier];
  const free = a.staked - a.locked;
  const unbonding = a.unbonding === 0n ? "none"
    : `${zen(a.unbonding)} ZEN, withdrawable ${a.unbondingEnds <= a.now ? "now" : `from ${when(a.unbondingEnds)}`}`;
  const rows = [
    figure("Address", h("span", { class: "mono" }, page.address)),
    figure("ZEN in your wallet", `${zen(a.balance)} ZEN`, { "data-field": "balance" }),
    figure("Role", ROLES[a.role] ?? `role ${a.role}`, { "data-field": "role" }),
  ];
  if (a.role === 1) {
    rows.push(
      figure("Tier", tier ? `${tier.name} (minimum stake ${zen(tier.min_stake)} ZEN)` : `tier ${a.tier}`, { "data-field": "tier" }),
      figure("Admitted", a.admitted ? "yes: a verifier checked your benchmark" : "not yet: waiting for a verifier to check your benchmark"));
  }
  rows.push(
    figure("Staked", `${zen(a.staked)} ZEN`, { "data-field": "staked" }),
    figure("Locked as job collateral", `${zen(a.locked)} ZEN`, { "data-field": "locked" }),
    figure("Free to unstake", `${zen(free)} ZEN`, { "data-field": "free" }),
    figure("Unbonding", unbonding, { "data-field": "unbonding" }));
  if (a.role === 1 && tier) {
    rows.push(figure("Can bid", a.admitted && a.staked >= BigInt(tier.min_stake) ? "yes"
      : a.staked < BigInt(tier.min_stake) ? `no: stake ${zen(BigInt(tier.min_stake) - a.staked)} ZEN more` : "no: not admitted yet"));
  }
  fill($("#account"), rows);
  $("#withdraw").disabled = a.unbonding === 0n;
}

async function refresh() {
  if (!page.address) return;
  $("#wallet-state").textContent = `Connected: ${page.address}`;
  $("#connect").hidden = true;
  const problem = await chainProblem();
  $("#switch-chain").hidden = problem === null;
  $("#actions").hidden = $("#account-section").hidden = problem !== null;
  if (problem) {
    say($("#problem"), problem);
    return;
  }
  page.account = await loadAccount();
  renderAccount(page.account);
}

// --- staking, unstaking, withdrawing ----------------------------------------------------------------

/** The amount typed in a form, in wei. */
function amountOf(form) {
  const text = form.elements.amount.value.trim().replaceAll(",", "");
  if (!/^\d+(\.\d{1,18})?$/.test(text)) {
    throw new WalletProblem("Enter an amount in ZEN, like 1000 or 0.5 (at most 18 decimals).");
  }
  const wei = parseUnits(text, DECIMALS);
  if (wei === 0n) throw new WalletProblem("Enter an amount above zero.");
  return wei;
}

/** Simulate first, so a contract refusal is decoded and shown before the wallet is asked to pay gas. */
async function send(functionName, args, progress) {
  const { request } = await page.reader.simulateContract({
    account: page.address, address: page.config.addresses.Staking, abi: page.stakingAbi, functionName, args,
  });
  progress("Confirm the transaction in your wallet…");
  const hash = await page.signer.writeContract(request);
  progress("Waiting for the transaction to be mined…");
  const receipt = await page.reader.waitForTransactionReceipt({ hash });
  if (receipt.status !== "success") throw new WalletProblem(`The transaction ${hash} was mined but reverted.`);
  return receipt;
}

async function stake(form, progress) {
  const amount = amountOf(form);
  const a = page.account;
  if (a.role === 0) {
    throw new WalletProblem("This wallet is not registered as a provider, so it cannot stake yet: " +
      "register it first with `zoo-compute node register`.");
  }
  if (amount > a.balance) {
    throw new WalletProblem(`You hold ${zen(a.balance)} ZEN, ${zen(amount - a.balance)} ZEN short of the ` +
      `${zen(amount)} ZEN you asked to stake.`);
  }
  const zenAddress = page.config.addresses.ZenToken;
  const [[, name, version, chainId, verifyingContract], nonce] = await Promise.all([
    read("ZenToken", "eip712Domain"), read("ZenToken", "nonces", [page.address]),
  ]);
  if (verifyingContract.toLowerCase() !== zenAddress.toLowerCase()) {
    throw new WalletProblem("The ZEN contract's signing domain names another contract: check the gateway's manifest.");
  }
  const deadline = a.now + PERMIT_TTL;
  progress("Sign the permit in your wallet: it lets the staking contract take exactly this amount…");
  const signature = await page.signer.signTypedData({
    account: page.address,
    domain: { name, version, chainId, verifyingContract },
    types: PERMIT_TYPES,
    primaryType: "Permit",
    message: { owner: page.address, spender: page.config.addresses.Staking, value: amount, nonce, deadline },
  });
  const { r, s, v, yParity } = parseSignature(signature);
  const receipt = await send("stakeWithPermit", [amount, deadline, Number(v ?? BigInt(yParity + 27)), r, s], progress);
  return `Staked ${zen(amount)} ZEN in block ${receipt.blockNumber} (transaction ${receipt.transactionHash}).`;
}

async function unstake(form, progress) {
  const amount = amountOf(form);
  const receipt = await send("requestUnstake", [amount], progress);
  return `${zen(amount)} ZEN is unbonding (block ${receipt.blockNumber}); withdraw it once the delay is over.`;
}

async function withdraw(_, progress) {
  const receipt = await send("withdraw", [], progress);
  return `Unbonded stake withdrawn to your wallet in block ${receipt.blockNumber}.`;
}

/** Run one action with the buttons disabled, its progress and outcome in plain words. */
function action(run) {
  return async (event) => {
    event.preventDefault();
    const buttons = document.querySelectorAll("button");
    buttons.forEach((b) => { b.disabled = true; });
    say($("#problem"), "");
    const progress = (text) => say($("#notice"), text);
    try {
      const done = await run(event.target, progress);
      if (done) progress(done);
      else say($("#notice"), "");
      if (event.target.reset) event.target.reset();
    } catch (error) {
      say($("#notice"), "");
      say($("#problem"), explain(error));
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
      await refresh().catch((error) => say($("#problem"), explain(error)));
    }
  };
}

// --- start ---------------------------------------------------------------------------------------------

async function start() {
  markLoaded();
  if (!window.ethereum) {
    say($("#problem"), "No wallet found in this browser: install MetaMask (or another EIP-1193 wallet) and reload.");
    return;
  }
  try {
    page.config = await get("chain/config");
  } catch (error) {
    say($("#problem"), `The gateway cannot say where the ledger is: ${error.message}`);
    return;
  }
  const { config } = page;
  page.zenAbi = config.abis.ZenToken;
  // Staking's own errors, plus the token's: a failed transfer inside stake reverts with ZEN's error.
  page.stakingAbi = [...config.abis.Staking, ...config.abis.ZenToken.filter((item) => item.type === "error")];
  page.chain = defineChain({
    id: config.chain_id, name: `Zoo Compute (chain ${config.chain_id})`,
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 }, rpcUrls: { default: { http: [] } },
  });
  const transport = custom(window.ethereum);
  page.reader = createPublicClient({ chain: page.chain, transport, pollingInterval: 500 });
  page.signer = createWalletClient({ chain: page.chain, transport });

  $("#connect").disabled = false;
  $("#connect").addEventListener("click", action(connect));
  $("#switch-chain").addEventListener("click", action(switchChain));
  $("#stake-form").addEventListener("submit", action(stake));
  $("#unstake-form").addEventListener("submit", action(unstake));
  $("#withdraw").addEventListener("click", action(withdraw));
  window.ethereum.on?.("chainChanged", () => { say($("#problem"), ""); refresh().catch((e) => say($("#problem"), explain(e))); });
  window.ethereum.on?.("accountsChanged", ([address]) => { page.address = address ?? null; refresh().catch((e) => say($("#problem"), explain(e))); });
}

start();
