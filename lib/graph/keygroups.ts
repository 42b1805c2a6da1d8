/**
 * Pure key routing, as in Flink: key -> key group (fixed for the life of the job's
 * state) -> partition by contiguous ranges. Rescaling moves whole key groups, so
 * only routing changes, never the stored state of a key.
 */
import { type Key, keyToString } from '../api/types.ts';
import { fmix32 } from '../util/hash.ts';

/** 32-bit hash of a key's string form (murmur-style mixing over UTF-16 code units). */
export function hashKeyString(s: string): number {
  let h = 0x9747b28c;
  for (let i = 0; i < s.length; i++) {
    h = Math.imul(h ^ s.charCodeAt(i), 0x5bd1e995);
    h ^= h >>> 15;
  }
  return fmix32(h ^ s.length);
}

// Consecutive records often share a key (a hot auction, a window's key): comparing
// with the last string is cheaper than hashing it again.
let lastString = '';
let lastHash = hashKeyString('');

export function keyGroupOfString(keyString: string, maxParallelism: number): number {
  if (keyString !== lastString) {
    lastString = keyString;
    lastHash = hashKeyString(keyString);
  }
  return lastHash % maxParallelism;
}

export function keyGroupOf(key: Key, maxParallelism: number): number {
  return keyGroupOfString(keyToString(key), maxParallelism);
}

/** Partition that owns a key group: contiguous ranges of key groups per partition. */
export function partitionOfKeyGroup(keyGroup: number, parallelism: number, maxParallelism: number): number {
  return Math.floor((keyGroup * parallelism) / maxParallelism);
}

/** The key groups [start, end) a partition owns; the inverse of partitionOfKeyGroup. */
export function keyGroupRange(partition: number, parallelism: number, maxParallelism: number): { start: number; end: number } {
  return {
    start: Math.ceil((partition * maxParallelism) / parallelism),
    end: Math.ceil(((partition + 1) * maxParallelism) / parallelism),
  };
}
