/**
 * Checks the generator against the nexmark-ts v1 fingerprint (NEXMARK.md
 * section 8): SHA-256 of events 0..999 999 as JSON lines, seed 42, rate
 * 10 000/s, base 1436918400000. Exits 1 on mismatch.
 *
 *   npx tsx bench/nexmark-conformance.ts
 */
import { createHash } from 'node:crypto';
import { generateEvent, serializeEvent, type NexmarkConfig } from '../lib/nexmark/index.ts';

const EXPECTED = 'a9d9a45c266e05fa77f70b807606690592c39e8c1efe317ff42002fafc29caeb';
const COUNT = 1_000_000;
const CONFIG: NexmarkConfig = { seed: 42, ratePerSec: 10_000, baseTime: 1436918400000 };
const CHUNK = 1000; // lines per hash update, to keep update() calls cheap

const hash = createHash('sha256');
const start = performance.now();
let buf = '';
for (let n = 0; n < COUNT; n++) {
  buf += serializeEvent(generateEvent(n, CONFIG)) + '\n';
  if ((n + 1) % CHUNK === 0) {
    hash.update(buf);
    buf = '';
  }
}
if (buf) hash.update(buf);
const digest = hash.digest('hex');
const secs = (performance.now() - start) / 1000;

console.log(`events:   ${COUNT} (seed ${CONFIG.seed}, rate ${CONFIG.ratePerSec}/s, base ${CONFIG.baseTime})`);
console.log(`sha256:   ${digest}`);
console.log(`expected: ${EXPECTED}`);
console.log(`time:     ${secs.toFixed(2)} s (${Math.round(COUNT / secs).toLocaleString('en-US')} events/s incl. hashing)`);
if (digest !== EXPECTED) {
  console.error('MISMATCH: generator does not conform to nexmark-ts v1');
  process.exit(1);
}
console.log('OK: conforms to nexmark-ts v1');
