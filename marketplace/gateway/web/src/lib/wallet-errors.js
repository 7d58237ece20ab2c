// Why a wallet action failed, in plain words: the wallet's own refusals (EIP-1193 codes), the
// ledger's custom errors decoded from the revert data, and the page's own checks.
import { BaseError, ContractFunctionRevertedError } from "viem";
import { when, zen } from "./format.js";

/** A problem the page found itself, already in plain words. */
export class WalletProblem extends Error {}

const REJECTED = 4001; // EIP-1193: the user rejected the request
const UNAUTHORIZED = 4100;
const DISCONNECTED = 4900;

/** The ledger's custom errors a staking action can meet, as sentences. */
const REVERTS = {
  NotRegistered: () => "This wallet is not registered as a provider, so it cannot stake yet: register it first with `zoo-compute node register`.",
  ZeroAmount: () => "Enter an amount above zero.",
  InsufficientFreeStake: ([, free, needed]) => `Only ${zen(free)} ZEN of your stake is free (the rest is locked as collateral for running jobs); you asked for ${zen(needed)} ZEN.`,
  UnbondingNotOver: ([endsAt]) => `Your unbonding stake can be withdrawn from ${when(endsAt)}, not yet.`,
  NothingToWithdraw: () => "Nothing has finished unbonding, so there is nothing to withdraw.",
  ERC20InsufficientBalance: ([, balance, needed]) => `You hold ${zen(balance)} ZEN, less than the ${zen(needed)} ZEN this needs.`,
  ERC20InsufficientAllowance: ([, allowance, needed]) => `The permit was not accepted: the staking contract may take ${zen(allowance)} ZEN of yours, not ${zen(needed)}. Sign again.`,
  SafeCastOverflowedUintDowncast: () => "That amount is larger than any stake can be.",
};

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
      const say = REVERTS[revert.data.errorName];
      return say ? say(revert.data.args ?? []) : `The ledger refused: ${revert.data.errorName}(${(revert.data.args ?? []).join(", ")}).`;
    }
    if (revert) return `The ledger refused: ${revert.reason ?? revert.shortMessage}.`;
    return error.shortMessage;
  }
  return error?.message ?? String(error);
}
