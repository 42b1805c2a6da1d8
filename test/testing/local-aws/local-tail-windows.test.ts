/**
 * Tail windows at zero traffic in local-AWS mode: a checkpointed job counting clicks per
 * user in tumbling windows gets one burst through the ingest handler and then nothing. No
 * data will ever move its watermark past the last windows; they fire because the
 * coordinator, idle with event-time timers in its acks, waits, probes every source
 * partition (whose watermarks then move on with processing time) and runs an epoch. The
 * output equals the embedded runtime's for the same requests at zero traffic. Once the
 * acks report no timers the coordinator's execution ends and nothing runs: no step, no
 * stage invocation, no message, until input comes again (and then it checkpoints it).
 */
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { CollectSink, type Sink } from '../../../lib/api/sinks.ts';
import { ManualClock } from '../../../lib/api/types.ts';
import { localAwsAt } from '../../../lib/testing/local-aws/endpoints.ts';
import { LocalAwsRuntime } from '../../../lib/testing/local-aws/runner.ts';
import { EmbeddedRuntime } from '../../../lib/local/embedded.ts';
import { unique } from '../../aws/helpers.ts';
import { type Click, type Count, clickCountsJob } from '../../support/click-counts.ts';

const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));
afterAll(() => env.close());
const dir = mkdtempSync(join(tmpdir(), 'sluice-tail-'));

const IDLE_TIMEOUT_MS = 1000;

function tailJob(name: string, windowMs = 1000) {
  return clickCountsJob(name, { idleTimeoutMs: IDLE_TIMEOUT_MS, windowMs });
}

/** The burst: two requests (one per source partition, round-robin), event times 0 .. 4720 over three users. */
const CLICKS: readonly Click[] = Array.from({ length: 60 }, (_, i) => ({ user: `u${i % 3}`, ts: i * 80 }));
const REQUESTS = [CLICKS.filter((_, i) => i % 2 === 0), CLICKS.filter((_, i) => i % 2 === 1)];
const rows = (records: readonly Count[]) => records.map((r) => JSON.stringify(r)).sort();

/** The embedded runtime at zero traffic: the same requests at 0, then processing time moves on with nothing arriving. */
async function embeddedOutput(): Promise<string[]> {
  const clock = new ManualClock(0);
  const out = new CollectSink<Count>();
  const runtime = new EmbeddedRuntime(tailJob('tail-embedded'), { clock, sinks: { out: out as Sink<any> }, sourceBatchSize: 100 });
  await runtime.start();
  try {
    for (const r of REQUESTS) expect(runtime.offer('clicks', r)).toEqual({ ok: true });
    for (let at = 0; at <= 10_000; at += IDLE_TIMEOUT_MS / 2) {
      clock.set(at);
      while (await runtime.step()) {}
    }
    return rows(out.records);
  } finally {
    await runtime.close();
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, ok: () => boolean | Promise<boolean>, describeState: () => string, limitMs = 60_000): Promise<void> {
  const t0 = Date.now();
  while (!(await ok())) {
    if (Date.now() - t0 > limitMs) throw new Error(`${what} did not happen within ${limitMs} ms: ${describeState()}`);
    await sleep(50);
  }
}

const apiEvent = (clicks: readonly Click[]) =>
  ({ version: '2.0', rawPath: '/streams/clicks/events', headers: { 'content-type': 'application/json' }, requestContext: { http: { method: 'POST' }, requestId: unique('r') }, body: JSON.stringify(clicks), isBase64Encoded: false }) as unknown as APIGatewayProxyEventV2;

describe('tail windows at zero traffic on local AWS', () => {
  it('a burst and then nothing: the last windows fire without input, as in the embedded runtime; then nothing runs until input comes', async () => {
    const expected = await embeddedOutput();
    // The last windows, [4000, 5000), fire only by extrapolation: no event is dated past 4720.
    expect(expected.filter((r) => JSON.parse(r).start === 4000)).toHaveLength(3);
    const sink = new CollectSink<Count>();
    const runtime = new LocalAwsRuntime(tailJob('tail'), { env, runId: unique('tail').slice(-20).replace(/^[^a-z]+/, 'r'), sinks: { out: sink as Sink<any> }, checkpoints: { dir: join(dir, 'tail'), intervalMs: 100, start: 'fresh' } });
    await runtime.start();
    const loop = runtime.checkpointing!.loop;
    const state = () => `${loop.describe()}; ${sink.records.length} windows of ${expected.length}`;
    try {
      for (const r of REQUESTS) expect((await runtime.ingest!(apiEvent(r))).statusCode).toBe(202);
      await until('the last windows', () => sink.records.length >= expected.length, state);
      await until('the coordinator ending', () => loop.describe().includes('ended at zero traffic'), state);
      expect(rows(sink.records)).toEqual(expected);
      // The burst's epoch, then at least one that carried the probes in.
      expect(loop.committed.length).toBeGreaterThanOrEqual(2);
      expect(loop.aborted).toEqual([]);

      // Ended: for several idle timeouts nothing runs (no coordinator step, no stage invocation, no message sent).
      const activity = () => ({
        transitions: runtime.accounting.totals('stepfunctions').requests,
        invocations: runtime.report().stages.reduce((n, s) => n + s.metrics.invocations, 0),
        sent: runtime.accounting.get('sqs', 'SendMessageBatch').items,
        committed: loop.committed.length,
      });
      const before = activity();
      await sleep(4 * IDLE_TIMEOUT_MS);
      expect(activity()).toEqual(before);
      expect(loop.describe()).toContain('ended at zero traffic');

      // Input wakes it: the new click is checkpointed by a new epoch.
      expect((await runtime.ingest!(apiEvent([{ user: 'u0', ts: 9000 }]))).statusCode).toBe(202);
      await until('an epoch after the wake-up', () => loop.committed.length > before.committed, state);
      expect(await runtime.deadLetters()).toEqual([]);
    } finally {
      await runtime.stop();
    }
  }, 120_000);

  it('input that arrives while the coordinator waits for a timer far ahead is checkpointed at once, as a new execution would (the lease is free)', async () => {
    // Two-hour windows: the timer is about 2 h of event time ahead, so the coordinator waits the longest wait, 1 h.
    const sink = new CollectSink<Count>();
    const runtime = new LocalAwsRuntime(tailJob('tail-far', 7_200_000), { env, runId: unique('far').slice(-20).replace(/^[^a-z]+/, 'r'), sinks: { out: sink as Sink<any> }, checkpoints: { dir: join(dir, 'far'), intervalMs: 100, start: 'fresh' } });
    await runtime.start();
    const loop = runtime.checkpointing!.loop;
    const state = () => loop.describe();
    try {
      for (const r of REQUESTS) expect((await runtime.ingest!(apiEvent(r))).statusCode).toBe(202);
      await until('the timers wait', () => loop.describe().includes('waiting after timers'), state);
      const committed = loop.committed.length;
      expect((await runtime.ingest!(apiEvent([{ user: 'u1', ts: 5000 }]))).statusCode).toBe(202);
      await until('an epoch for the new input', () => loop.committed.length > committed, state);
      // Its acks still report the timer: back to waiting; the window is far from due.
      await until('the timers wait again', () => loop.describe().includes('waiting after timers'), state);
      expect(sink.records).toEqual([]);
    } finally {
      await runtime.stop();
    }
  }, 120_000);
});
