// Why a wallet action failed, in plain words: the wallet's own refusals (EIP-1193 codes), the
// ledger's custom errors decoded from the revert data, and the page's own checks.
import { BaseError, ContractFunctionRevertedError } from "viem";
import { when, zen } from "./format.js";
import REVERTS from "../../../../chain/revert_messages.json";

/** A problem the page found itself, already in plain words. */
export class WalletProblem extends Error {}

const REJECTED = 4001; // EIP-1193: the user rejected the request
const UNAUTHORIZED = 4100;
const DISCONNECTED = 4900;

const PLACEHOLDER = /\{(\w+)(?::(\w+))?\}/g;

function formatted(value, kind) {
  if (kind === "zen") return zen(value);
  if (kind === "time") return when(value);
  const names = REVERTS.enums[kind];
  if (names) return names[Number(value)] ?? String(value);
  return String(value);
}

/** A ledger custom error in words, from the table the CLI and the gateway use too. */
export function sentence(name, args = [], inputs = []) {
  const template = REVERTS.messages[name];
  if (!template) return `The ledger refused: ${name}(${args.join(", ")}).`;
  const byName = Object.fromEntries(inputs.map((input, i) => [input.name, args[i]]));
  return template.replace(PLACEHOLDER, (_, arg, kind) => formatted(byName[arg], kind));
}

function walletCode(error) {
  if (error instanceof BaseError) return error.walk((e) => typeof e?.code === "number")?.code;
  return error?.code;
}

export function explain(error) {
  if (error instanceof WalletProblem) return error.message;
  const code = walletCode(error);
  if (code === REJECTED) return "You declined the request in your wallet, so nothing was signed or sent.";
  if (code === UNAUTHORIZED) return "Your wallet has not allowed this page to use that account: connect again.";
  if (code === DISCONNECTED) return "Your wallet is not connected to any chain.";
  if (error instanceof BaseError) {
    if (error.walk((e) => e?.name === "ChainMismatchError")) return "Your wallet switched to another chain: switch back and try again.";
    const revert = error.walk((e) => e instanceof ContractFunctionRevertedError);
    if (revert?.data?.errorName) {
      return sentence(revert.data.errorName, revert.data.args ?? [], revert.data.abiItem?.inputs ?? []);
    }
    if (revert) return `The ledger refused: ${revert.reason ?? revert.shortMessage}.`;
    return error.shortMessage;
  }
  return error?.message ?? String(error);
}
