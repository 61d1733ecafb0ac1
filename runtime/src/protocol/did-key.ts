// did:key for Ed25519: the base58btc encoding and the conversions between a did:key and its
// public key, which is the identifier itself (resolved locally, no network).
import { publicKeyFromRaw } from "./keys.ts";
import type { KeyObject } from "node:crypto";

/**
 * did:key for Ed25519 (W3C CCG did:key method): `did:key:` + multibase base58btc ('z') of the
 * multicodec varint 0xed 0x01 followed by the raw 32-byte public key. The key is the identifier
 * itself, so resolution is local and needs no network. Only Ed25519 is accepted.
 */
const ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
const INDEX = new Map([...ALPHABET].map((c, i) => [c, i]));
const ED25519_PUB = [0xed, 0x01];
/** 'z' + base58 of 34 bytes is 48 characters; anything much longer is not an Ed25519 did:key. */
const MAX_ID_CHARS = 64;

export class DidKeyError extends Error {}

export function base58btcDecode(text: string): Uint8Array {
  if (text.length > MAX_ID_CHARS * 2) throw new DidKeyError("base58btc value too long");
  let zeros = 0;
  while (zeros < text.length && text[zeros] === "1") zeros++;
  const bytes: number[] = [];
  for (const c of text) {
    let carry = INDEX.get(c);
    if (carry === undefined) throw new DidKeyError(`${JSON.stringify(c)} is not a base58btc character`);
    for (let i = 0; i < bytes.length; i++) {
      carry += bytes[i]! * 58;
      bytes[i] = carry & 0xff;
      carry >>= 8;
    }
    while (carry > 0) {
      bytes.push(carry & 0xff);
      carry >>= 8;
    }
  }
  // Leading '1's are leading zero bytes; the digits themselves never produce them.
  while (bytes.length && bytes[bytes.length - 1] === 0 && bytes.length > text.length - zeros) bytes.pop();
  return Uint8Array.from([...new Array(zeros).fill(0), ...bytes.reverse()]);
}

export function base58btcEncode(data: Uint8Array): string {
  let zeros = 0;
  while (zeros < data.length && data[zeros] === 0) zeros++;
  const digits: number[] = [];
  for (const byte of data) {
    let carry = byte;
    for (let i = 0; i < digits.length; i++) {
      carry += digits[i]! << 8;
      digits[i] = carry % 58;
      carry = Math.floor(carry / 58);
    }
    while (carry > 0) {
      digits.push(carry % 58);
      carry = Math.floor(carry / 58);
    }
  }
  return (
    "1".repeat(zeros) +
    digits
      .reverse()
      .map((d) => ALPHABET[d])
      .join("")
  );
}

export function isDidKey(agentId: string): boolean {
  return agentId.startsWith("did:key:");
}

/** The raw Ed25519 public key (base64url, no padding) a did:key names; throws DidKeyError otherwise. */
export function didKeyPublicKey(did: string): string {
  if (!isDidKey(did)) throw new DidKeyError(`${did} is not a did:key`);
  const msid = did.slice("did:key:".length);
  if (msid.length > MAX_ID_CHARS) throw new DidKeyError("the did:key is too long to be an Ed25519 key");
  if (!msid.startsWith("z")) throw new DidKeyError("only base58btc ('z') multibase did:key identifiers are supported");
  const bytes = base58btcDecode(msid.slice(1));
  if (bytes.length !== 34 || bytes[0] !== ED25519_PUB[0] || bytes[1] !== ED25519_PUB[1]) {
    throw new DidKeyError("the did:key does not hold an Ed25519 public key (multicodec 0xed01, 32 bytes)");
  }
  return Buffer.from(bytes.subarray(2)).toString("base64url");
}

export function didKeyKeyObject(did: string): KeyObject {
  return publicKeyFromRaw(didKeyPublicKey(did));
}

/** The did:key of a raw Ed25519 public key (base64url, no padding). */
export function didKeyFromPublicKey(base64url: string): string {
  const raw = Buffer.from(base64url, "base64url");
  if (raw.length !== 32) throw new DidKeyError("an Ed25519 public key has 32 bytes");
  return `did:key:z${base58btcEncode(Uint8Array.from([...ED25519_PUB, ...raw]))}`;
}
