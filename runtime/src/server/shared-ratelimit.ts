// SharedRateLimiter: token buckets like RateLimiter's, kept in a SharedArrayBuffer under one lock,
// so that every event loop of a runtime (runtime.workers, docs/scale.md#more-than-one-core) takes
// from the same buckets and a sender's limit holds for the pod, whichever loop serves it.
import { hash } from "node:crypto";
import {
  CLOCK_SKEW_S,
  MAX_SIGNATURE_AGE_S,
  type NonceStore,
  nonceForgotten,
  nonceTaken,
} from "../protocol/http-signatures.ts";

/** What the inbox takes its limits from: a RateLimiter of one event loop, or a SharedRateLimiter of all. */
export interface Limiter {
  take(key: string, cost?: number): { ok: true } | { ok: false; retryAfterSeconds: number };
  give(key: string, cost?: number): void;
}

/** A SharedRateLimiter as posted to a worker thread (structured clone keeps the buffer shared). */
export interface SharedBuckets {
  buffer: SharedArrayBuffer;
  perMinute: number;
  windowMs: number;
  slots: number;
}

/** Slots one key may be found in, from the slot its digest names on. */
const WINDOW = 16;
/** A key is known by these many 32-bit words of its SHA-256 (128 bits). */
const KEY_WORDS = 4;

/**
 * Token buckets keyed by sender (or client address) in shared memory: `perMinute` tokens (per
 * `windowMs`), refilled evenly, as RateLimiter. Each key is kept as 128 bits of its SHA-256 in one
 * of the WINDOW slots from where its digest points, with its tokens and when they were counted.
 * Take and give hold one lock (an Atomics compare-and-exchange on the buffer's first word) for a
 * few dozen operations, so two event loops never both spend the last token.
 *
 * Bounded like RateLimiter, and never forgetting a key still limited: a new key takes an empty
 * slot of its window or one whose bucket has refilled completely (it behaves like a new one); when
 * every slot of its window holds a bucket still refilling, the new key is refused like an
 * exhausted one, with the time until the first of them is full.
 */
export class SharedRateLimiter implements Limiter {
  readonly shared: SharedBuckets;
  private readonly lock: Int32Array;
  private readonly keys: Uint32Array;
  /** Per slot: tokens, then when they were counted (ms since the epoch). */
  private readonly values: Float64Array;
  private readonly capacity: number;
  private readonly perMs: number;
  private readonly mask: number;
  private readonly now: () => number;

  /** New buckets for about `maxKeys` keys; `shared` goes to the worker threads that attach to them. */
  static create(
    perMinute: number,
    opts: { maxKeys?: number; windowMs?: number; now?: () => number } = {},
  ): SharedRateLimiter {
    let slots = 1024;
    while (slots < (opts.maxKeys ?? 100_000)) slots *= 2;
    const buffer = new SharedArrayBuffer(8 + slots * (KEY_WORDS * 4 + 16));
    return new SharedRateLimiter({ buffer, perMinute, windowMs: opts.windowMs ?? 60_000, slots }, opts.now);
  }

  constructor(shared: SharedBuckets, now: () => number = Date.now) {
    this.shared = shared;
    const { buffer, slots } = shared;
    this.lock = new Int32Array(buffer, 0, 1);
    this.values = new Float64Array(buffer, 8, slots * 2);
    this.keys = new Uint32Array(buffer, 8 + slots * 16, slots * KEY_WORDS);
    this.capacity = shared.perMinute;
    this.perMs = shared.perMinute / shared.windowMs;
    this.mask = slots - 1;
    this.now = now;
  }

  /** As Limiter's; `full` when the key is new and every slot it may take holds a bucket still refilling. */
  take(key: string, cost = 1): { ok: true } | { ok: false; retryAfterSeconds: number; full?: true } {
    cost = Math.min(cost, this.capacity);
    const digest = keyDigest(key);
    const now = this.now();
    this.acquire();
    try {
      let slot = this.find(digest);
      if (slot < 0) {
        const free = this.reusable(digest, now);
        if (free.slot < 0) return { ok: false, retryAfterSeconds: this.seconds(free.missing), full: true };
        slot = free.slot;
        this.keys.set(digest, slot * KEY_WORDS);
        this.values[slot * 2] = this.capacity;
      }
      const tokens = this.level(slot, now);
      this.values[slot * 2 + 1] = now;
      if (tokens >= cost) {
        this.values[slot * 2] = tokens - cost;
        return { ok: true };
      }
      this.values[slot * 2] = tokens;
      return { ok: false, retryAfterSeconds: this.seconds(cost - tokens) };
    } finally {
      Atomics.store(this.lock, 0, 0);
    }
  }

  give(key: string, cost = 1): void {
    const digest = keyDigest(key);
    const now = this.now();
    this.acquire();
    try {
      const slot = this.find(digest);
      if (slot < 0) return;
      this.values[slot * 2] = Math.min(this.capacity, this.level(slot, now) + Math.min(cost, this.capacity));
      this.values[slot * 2 + 1] = now;
    } finally {
      Atomics.store(this.lock, 0, 0);
    }
  }

  private acquire(): void {
    // Held for a few dozen operations by another loop: spun on, never slept on.
    while (Atomics.compareExchange(this.lock, 0, 0, 1) !== 0);
  }

  /** The slot of the window holding this key, or -1. */
  private find(digest: Uint32Array): number {
    for (let i = 0; i < WINDOW; i++) {
      const slot = (digest[0]! + i) & this.mask;
      const at = slot * KEY_WORDS;
      if (
        this.keys[at] === digest[0] &&
        this.keys[at + 1] === digest[1] &&
        this.keys[at + 2] === digest[2] &&
        this.keys[at + 3] === digest[3]
      )
        return slot;
    }
    return -1;
  }

  /** An empty slot of the window, or one whose bucket is full; else the fewest tokens any of them lacks. */
  private reusable(digest: Uint32Array, now: number): { slot: number; missing: number } {
    let missing = this.capacity;
    for (let i = 0; i < WINDOW; i++) {
      const slot = (digest[0]! + i) & this.mask;
      const at = slot * KEY_WORDS;
      const empty = (this.keys[at]! | this.keys[at + 1]! | this.keys[at + 2]! | this.keys[at + 3]!) === 0;
      const lacking = empty ? 0 : this.capacity - this.level(slot, now);
      if (lacking <= 0) return { slot, missing: 0 };
      missing = Math.min(missing, lacking);
    }
    return { slot: -1, missing };
  }

  private level(slot: number, now: number): number {
    return Math.min(this.capacity, this.values[slot * 2]! + (now - this.values[slot * 2 + 1]!) * this.perMs);
  }

  /** Whole seconds (at least one) until `tokens` more have been refilled. */
  private seconds(tokens: number): number {
    return Math.max(1, Math.ceil(tokens / this.perMs / 1000));
  }
}

/**
 * The nonces of request signatures (SignatureNonces' job) for every event loop of the pod: a
 * nonce is a bucket of one token that refills only after any signature carrying it is too old
 * to be taken (MAX_SIGNATURE_AGE_S after a `created` up to CLOCK_SKEW_S ahead), so a nonce is
 * taken once whichever loop sees it. A nonce whose slots all hold nonces still live is answered
 * 503 (sign again), as SignatureNonces answers one it can no longer tell from a replay.
 */
export class SharedNonces implements NonceStore {
  static readonly WINDOW_MS = (MAX_SIGNATURE_AGE_S + CLOCK_SKEW_S + 1) * 1000;
  readonly buckets: SharedRateLimiter;

  /** New nonces for about `maxKeys` signatures per WINDOW_MS, or those of `shared` (another loop's). */
  constructor(opts: { shared?: SharedBuckets; maxKeys?: number; now?: () => number } = {}) {
    const { shared, maxKeys = 262_144, now = Date.now } = opts;
    this.buckets = shared
      ? new SharedRateLimiter(shared, now)
      : SharedRateLimiter.create(1, { maxKeys, windowMs: SharedNonces.WINDOW_MS, now });
  }

  use(keyid: string, nonce: string): void {
    const taken = this.buckets.take(`${keyid} ${nonce}`);
    if (taken.ok) return;
    throw taken.full ? nonceForgotten() : nonceTaken();
  }
}

/** 128 bits of the key's SHA-256, never all zero (the mark of an empty slot). */
function keyDigest(key: string): Uint32Array {
  const bytes = hash("sha256", key, "buffer");
  const words = new Uint32Array(KEY_WORDS);
  for (let i = 0; i < KEY_WORDS; i++) words[i] = bytes.readUInt32LE(i * 4);
  if ((words[0]! | words[1]! | words[2]! | words[3]!) === 0) words[3] = 1;
  return words;
}
