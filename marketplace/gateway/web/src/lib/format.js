// Amounts exactly as the ledger holds them: ZEN has 18 decimals and every figure is shown to the
// wei (no rounding), so what a reader sees can be checked against the chain digit for digit.
import { formatUnits } from "viem";

export const DECIMALS = 18;

/** Wei (bigint, or the decimal string the API sends) as exact ZEN with thousands separators. */
export function zen(wei) {
  const [whole, fraction] = formatUnits(BigInt(wei), DECIMALS).split(".");
  const grouped = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return fraction ? `${grouped}.${fraction}` : grouped;
}

/** `0x1234…abcd`: enough of an address or hash to recognise; the full value goes in a title. */
export function short(hex) {
  return hex.length > 14 ? `${hex.slice(0, 6)}…${hex.slice(-4)}` : hex;
}

/** A unix time (seconds) in the reader's locale. */
export function when(seconds) {
  return new Date(Number(seconds) * 1000).toLocaleString();
}

/** `part` as a percentage of `whole` with two decimals, or "—" when there is no whole. */
export function percent(part, whole) {
  const w = BigInt(whole);
  if (w === 0n) return "—";
  const hundredths = (BigInt(part) * 10000n) / w;
  return `${hundredths / 100n}.${String(hundredths % 100n).padStart(2, "0")}%`;
}
