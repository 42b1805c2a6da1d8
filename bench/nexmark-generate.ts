/**
 * Writes Nexmark events (nexmark-ts v1) to a JSON-lines file: line k is
 * event number offset + k, so files generated in ranges concatenate into
 * the same stream.
 *
 *   npx tsx bench/nexmark-generate.ts --count 1000000 --seed 42 --rate 10000 --out events.jsonl
 *
 * Options: --count (required), --seed (uint32, default 0), --rate (events/s
 * of event time, default 10000), --base-time (epoch ms, default
 * 1436918400000), --offset (first event number, default 0), --out (file;
 * "-" or omitted = stdout).
 */
import { createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { parseArgs } from 'node:util';
import type { Writable } from 'node:stream';
import {
  DEFAULT_BASE_TIME,
  DEFAULT_RATE_PER_SEC,
  DEFAULT_SEED,
  generateEvent,
  serializeEvent,
  type NexmarkConfig,
} from '../lib/nexmark/index.ts';

const CHUNK_LINES = 2000; // batch lines per write(): one write per line is slow

function fail(message: string): never {
  console.error(`nexmark-generate: ${message}`);
  process.exit(2);
}

function intArg(raw: string | undefined, name: string, fallback: number, min: number, max: number): number {
  if (raw === undefined) return fallback;
  const v = Number(raw);
  if (!Number.isSafeInteger(v) || v < min || v > max) fail(`--${name} must be an integer in [${min}, ${max}], got "${raw}"`);
  return v;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      count: { type: 'string' },
      seed: { type: 'string' },
      rate: { type: 'string' },
      'base-time': { type: 'string' },
      offset: { type: 'string' },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    console.log('usage: nexmark-generate --count N [--seed S] [--rate R] [--base-time MS] [--offset K] [--out FILE]');
    return;
  }
  if (values.count === undefined) fail('--count is required');
  const count = intArg(values.count, 'count', 0, 0, Number.MAX_SAFE_INTEGER);
  const offset = intArg(values.offset, 'offset', 0, 0, Number.MAX_SAFE_INTEGER - count);
  const config: NexmarkConfig = {
    seed: intArg(values.seed, 'seed', DEFAULT_SEED, 0, 0xffffffff),
    ratePerSec: intArg(values.rate, 'rate', DEFAULT_RATE_PER_SEC, 1, Number.MAX_SAFE_INTEGER),
    baseTime: intArg(values['base-time'], 'base-time', DEFAULT_BASE_TIME, 0, Number.MAX_SAFE_INTEGER),
  };

  const toStdout = values.out === undefined || values.out === '-';
  const out: Writable = toStdout ? process.stdout : createWriteStream(values.out!);
  const start = performance.now();
  let buf = '';
  for (let i = 0; i < count; i++) {
    buf += serializeEvent(generateEvent(offset + i, config)) + '\n';
    if ((i + 1) % CHUNK_LINES === 0) {
      if (!out.write(buf)) await once(out, 'drain');
      buf = '';
    }
  }
  if (buf) out.write(buf);
  if (!toStdout) {
    out.end();
    await once(out, 'finish');
    const secs = (performance.now() - start) / 1000;
    console.error(`wrote ${count} events to ${values.out} in ${secs.toFixed(2)} s`);
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
