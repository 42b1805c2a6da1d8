/**
 * `sluice run` end to end: Nexmark Q5 over a generated file, checked against an
 * independent brute-force computation of NEXMARK.md's Q5 semantics, run twice
 * for byte-identical output, plus argument errors.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateEvent, serializeEvent, type NexmarkEvent } from '../../lib/nexmark/index.ts';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { inInputOrder } from '../../lib/cli/run.ts';
import { sluice } from './helpers.ts';
import { sluiceInProcess } from './in-process.ts';

const COUNT = 4000;
// 200 events/s of event time: 4000 events span 20 s, so about a dozen 10 s windows with different winners.
const CONFIG = { seed: 7, ratePerSec: 200 };

interface Row {
  auction: number;
  num: number;
  windowStart: number;
  windowEnd: number;
}

/** Q5 by definition: every (window, auction) count, then each window's maximum with ties. */
function bruteForceQ5(events: NexmarkEvent[], size = 10_000, slide = 2_000): Row[] {
  const counts = new Map<string, number>();
  for (const e of events) {
    if (e.type !== 'bid') continue;
    // Windows [s, s + size) with s a multiple of slide and t - size < s <= t.
    for (let s = Math.floor(e.dateTime / slide) * slide; s > e.dateTime - size; s -= slide) {
      const k = `${s} ${e.auction}`;
      counts.set(k, (counts.get(k) ?? 0) + 1);
    }
  }
  const max = new Map<number, number>();
  for (const [k, n] of counts) {
    const s = Number(k.split(' ')[0]);
    max.set(s, Math.max(max.get(s) ?? 0, n));
  }
  const rows: Row[] = [];
  for (const [k, n] of counts) {
    const [s, a] = k.split(' ').map(Number);
    if (n === max.get(s)) rows.push({ auction: a, num: n, windowStart: s, windowEnd: s + size });
  }
  return sortRows(rows);
}

function sortRows(rows: Row[]): Row[] {
  return rows.sort((x, y) => x.windowStart - y.windowStart || x.auction - y.auction);
}

let dir: string;
let input: string;
let events: NexmarkEvent[];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-run-'));
  input = join(dir, 'events.jsonl');
  events = Array.from({ length: COUNT }, (_, n) => generateEvent(n, CONFIG));
  await writeFile(input, events.map((e) => serializeEvent(e) + '\n').join(''));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('sluice run examples/nexmark/q5.ts', () => {
  it('computes Q5, byte-identical across runs', async () => {
    const outs = [join(dir, 'q5-a.jsonl'), join(dir, 'q5-b.jsonl')];
    for (const out of outs) {
      const r = await sluice(['run', 'examples/nexmark/q5.ts', '--input', input, '--output', out]);
      expect(r.stderr).toMatch(/4,000 records in, \d+ out/);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toMatch(/0 rejected inputs, 0 dead letters/);
    }
    const [a, b] = await Promise.all(outs.map((f) => readFile(f)));
    expect(a.equals(b)).toBe(true);

    const rows = a.toString('utf8').trim().split('\n').map((l) => JSON.parse(l) as Row);
    const expected = bruteForceQ5(events);
    expect(expected.length).toBeGreaterThan(10);
    expect(new Set(expected.map((r) => r.windowStart)).size).toBeGreaterThan(8);
    expect(sortRows(rows)).toEqual(expected);
    // Field order is part of the output format.
    expect(Object.keys(rows[0])).toEqual(['auction', 'num', 'windowStart', 'windowEnd']);
  });

  it('takes job parameters (--param sizeMs, slideMs, parallelism)', async () => {
    const out = join(dir, 'q5-params.jsonl');
    const r = await sluice(['run', 'examples/nexmark/q5.ts', '--input', input, '--output', out, '--param', 'sizeMs=6000', '--param', 'slideMs=3000', '--param', 'parallelism=3']);
    expect(r.code, r.stderr).toBe(0);
    const rows = (await readFile(out, 'utf8')).trim().split('\n').map((l) => JSON.parse(l) as Row);
    expect(sortRows(rows)).toEqual(bruteForceQ5(events, 6000, 3000));
  });

  it('reports rejected lines and writes them with --dead-letters', async () => {
    const bad = join(dir, 'bad.jsonl');
    const lines = events.slice(0, 200).map((e) => serializeEvent(e));
    lines.splice(10, 0, 'not json', '{"type":"bid","auction":1}');
    await writeFile(bad, lines.join('\n') + '\n');
    const dl = join(dir, 'dead.jsonl');
    const r = await sluice(['run', 'examples/nexmark/q5.ts', '--input', bad, '--output', join(dir, 'bad-out.jsonl'), '--dead-letters', dl]);
    expect(r.code, r.stderr).toBe(EXIT.rejects); // completed, but not everything was taken
    expect(r.stderr).toMatch(/2 input line\(s\) rejected/);
    expect(r.stderr).toMatch(/bad\.jsonl:11/);
    expect(r.stderr).toMatch(/dateTime/);
    expect(r.stderr).toMatch(/200 records in, \d+ out.*2 rejected inputs/);
    const written = (await readFile(dl, 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
    expect(written).toHaveLength(2);
    expect(written.every((w) => w.kind === 'rejected')).toBe(true);
    // The same run, allowed: exit 0, and the same report.
    const allowed = await sluice(['run', 'examples/nexmark/q5.ts', '--input', bad, '--output', join(dir, 'bad-out.jsonl'), '--allow-rejects', '--json']);
    expect(allowed.code, allowed.stderr).toBe(EXIT.ok);
    expect(allowed.stderr).toMatch(/200 records in, \d+ out.*2 rejected inputs/);
    // --json: the summary, alone on stdout, in its documented shape.
    const summary = JSON.parse(allowed.stdout);
    expect(Object.keys(summary)).toEqual(['job', 'target', 'output', 'recordsIn', 'recordsOut', 'rejectedInputs', 'deadLetters', 'deadLetterFile', 'deadLettersWritten', 'lateDropped', 'durationMs']);
    const out = (await readFile(join(dir, 'bad-out.jsonl'), 'utf8')).trim().split('\n');
    expect(summary).toEqual({ job: 'nexmark-q5', target: 'embedded', output: join(dir, 'bad-out.jsonl'), recordsIn: 200, recordsOut: out.length, rejectedInputs: 2, deadLetters: 0, deadLetterFile: null, deadLettersWritten: null, lateDropped: {}, durationMs: expect.any(Number) });
  });
});

// Parsed in this process (in-process.ts): help.test.ts spawns the bin for the exit status of an error.
describe('sluice run argument errors', () => {
  const cases: [string, string[], RegExp][] = [
    ['missing input file', ['run', 'examples/nexmark/q5.ts', '--input', '/nonexistent/events.jsonl', '--output', '/tmp/o.jsonl'], /--input: expected a readable JSON-lines file, received "\/nonexistent\/events.jsonl" \(ENOENT\)/],
    ['malformed --param', ['run', 'examples/nexmark/q5.ts', '--input', 'package.json', '--output', '/tmp/o.jsonl', '--param', 'sizeMs'], /--param: expected key=value.*received "sizeMs"/],
    ['unknown --sink', ['run', 'examples/nexmark/q5.ts', '--input', 'package.json', '--output', '/tmp/o.jsonl', '--sink', 'nope'], /--sink: expected the name of one of the job's sinks: "results", received "nope"/],
    ['missing job module', ['run', 'examples/none.ts', '--input', 'package.json', '--output', '/tmp/o.jsonl'], /<job>: expected a path to a job module.*examples\/none\.ts/],
  ];
  it.each(cases)('%s: exit 1 naming the flag', async (_name, args, message) => {
    const r = await sluiceInProcess(args);
    expect(r.code).toBe(EXIT.error);
    expect(r.stderr).toMatch(message);
  });

  it('with --json, the error as JSON on stdout: which flag, what was expected, what was received', async () => {
    const r = await sluiceInProcess(['run', 'examples/nexmark/q5.ts', '--input', '/nonexistent/events.jsonl', '--output', '/tmp/o.jsonl', '--json']);
    expect(r.code).toBe(EXIT.error);
    expect(JSON.parse(r.stdout)).toEqual({
      error: { kind: 'error', code: 'CONFIG', message: expect.stringContaining('--input: expected'), field: '--input', expected: 'a readable JSON-lines file', received: '"/nonexistent/events.jsonl" (ENOENT)' },
    });
  });
});

describe('sluice run: rejected lines', () => {
  it('are reported by source and line, however they were found (parse errors when read, timestamp errors when stamped)', () => {
    const r = (source: string, line: number, error: string) => ({ source, position: `${source}.jsonl:${line}`, error });
    expect(inInputOrder([r('a', 3, 'json'), r('a', 2, 'timestamp'), r('b', 1, 'json'), r('a', 10, 'schema')]).map((x) => x.position)).toEqual(['a.jsonl:2', 'a.jsonl:3', 'a.jsonl:10', 'b.jsonl:1']);
  });
});
