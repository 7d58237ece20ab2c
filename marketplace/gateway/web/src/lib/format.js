// Amounts as the ledger holds them: integer wei (ZEN has 18 decimals), turned into decimal text
// with bigint arithmetic only, never through a float. `zen` is exact to the wei; `zenShort` is what
// a table shows (6 decimals, as the CLI prints), marked when it had to round.
import { formatUnits } from "viem";

export const DECIMALS = 18;
export const SHORT_DECIMALS = 6;

const group = (whole) => whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",");

/** Wei (bigint, or the decimal string the API sends) as exact ZEN with thousands separators. */
export function zen(wei) {
  const [whole, fraction] = formatUnits(BigInt(wei), DECIMALS).split(".");
  return fraction ? `${group(whole)}.${fraction}` : group(whole);
}

/** Wei as ZEN to at most `decimals` places: `{ text, exact }`. An amount with more places is
 * rounded to the nearest (half away from zero) and its text starts with `≈`; one too small to show
 * reads `<0.000001`. The exact figure is `zen(wei)`, which the pages put in a title. */
export function zenShort(wei, decimals = SHORT_DECIMALS) {
  const value = BigInt(wei);
  const magnitude = value < 0n ? -value : value;
  const unit = 10n ** BigInt(DECIMALS - decimals);
  const exact = magnitude % unit === 0n;
  const rounded = (magnitude + unit / 2n) / unit; // in units of 10^-decimals ZEN
  const sign = value < 0n ? "-" : "";
  if (rounded === 0n && !exact) {
    return { text: `${value < 0n ? ">-" : "<"}${formatUnits(1n, decimals)}`, exact: false };
  }
  const [whole, fraction] = formatUnits(rounded, decimals).split(".");
  const text = `${sign}${group(whole)}${fraction ? `.${fraction}` : ""}`;
  return { text: exact ? text : `≈${text}`, exact };
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
