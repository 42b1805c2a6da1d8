/**
 * Idle source partitions in local-AWS mode (issue 3): a job with four source partitions
 * gets data on only some of them, through the real ingest handler, the SQS event source
 * stand-in and the operator handlers against fauxqs and DynamoDB Local. The ingest
 * function probes the silent partitions; once the idle timeout separates a partition's
 * last data from a probe (the injected clock), it stops holding event time back and the
 * windows fire. A partition that gets data again counts again. Nothing is late, lost or
 * parked. The embedded runtime, fed the same arrivals per partition at the same clock,
 * fires the same windows at the same steps.
 */
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { CollectSink, Sinks, type Sink } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { keyToString, ManualClock, WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';
import { localAwsAt } from '../../lib/testing/local-aws/endpoints.ts';
import { LocalAwsRuntime } from '../../lib/testing/local-aws/runner.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { keyGroupOfString, partitionOfKeyGroup } from '../../lib/graph/keygroups.ts';
import { unique } from './helpers.ts';
import { type Click, type Count, clickCountsJob } from '../support/click-counts.ts';

const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));
afterAll(() => env.close());

const MAX_P = 16;
const SOURCE_PARTITIONS = 4;

function clicksJob() {
  return clickCountsJob('idle-clicks', { parallelism: 2, sourcePartitions: SOURCE_PARTITIONS, maxParallelism: MAX_P, idleTimeoutMs: 1000 });
}

/** Idempotency keys whose hash sends a request to source partition p (the ingest handler routes by it). */
function keysFor(p: number): () => string {
  let i = 0;
  return () => {
    for (;;) {
      const key = `req-${p}-${i++}`;
      if (partitionOfKeyGroup(keyGroupOfString(keyToString(key), MAX_P), SOURCE_PARTITIONS, MAX_P) === p) return key;
    }
  };
}

describe('idle source partitions on AWS', () => {
  it('fire windows when only some source partitions get data; a partition that gets data again counts again', async () => {
    const clock = new ManualClock(0);
    const sink = new CollectSink<Count>();
    const runtime = new LocalAwsRuntime(clicksJob(), { env, runId: unique('idle').slice(-20).replace(/^[^a-z]+/, 'r'), clock, sinks: { out: sink as Sink<any> } });
    await runtime.start();
    const nextKey = [0, 1, 2, 3].map(keysFor);
    const post = async (p: number, ...ts: number[]) => {
      const clicks: Click[] = ts.map((t) => ({ user: `u${t % 3}`, ts: t }));
      const event = {
        version: '2.0',
        rawPath: '/streams/clicks/events',
        headers: { 'content-type': 'application/json', 'idempotency-key': nextKey[p]() },
        requestContext: { http: { method: 'POST' }, requestId: unique('r') },
        body: JSON.stringify(clicks),
        isBase64Encoded: false,
      };
      const res = await runtime.ingest!(event as unknown as APIGatewayProxyEventV2);
      expect(res.statusCode).toBe(202);
      await runtime.drained();
    };
    const windows = () => [...sink.records].sort((a, b) => a.start - b.start || a.user.localeCompare(b.user));
    try {
      // t=0: data on partitions 0 and 1; the first request also probes 1, 2 and 3 (starting their count).
      await post(0, 100, 200);
      await post(1, 300, 1500);
      expect(sink.records).toEqual([]);
      // t=500: data on 0 again; no probe is due yet (a timeout per partition per container).
      clock.set(500);
      await post(0, 1600);
      expect(sink.records).toEqual([]); // 2 and 3 hold event time back: not yet idle

      // t=1000: partition 1 had nothing since 0, 2 and 3 never had anything: the probes find them idle.
      clock.set(1000);
      await post(0, 1700);
      // Only partition 0 is active (watermark 1699): [0, 1000) fires.
      expect(windows()).toEqual([
        { user: 'u0', start: 0, n: 1 },
        { user: 'u1', start: 0, n: 1 },
        { user: 'u2', start: 0, n: 1 },
      ]);

      // Partition 2 gets data (1800 > 1699: not late) and counts again; so does partition 1.
      clock.set(1100);
      await post(2, 1800);
      await post(0, 2600);
      await post(1, 2700);
      expect(windows()).toHaveLength(3); // partition 2 now holds [1000, 2000) at 1799
      await post(2, 2900);
      // Partition 3 never got data and stays idle: [1000, 2000) fires with 1500, 1600, 1700 and 1800.
      const second = windows().filter((w) => w.start === 1000);
      expect(second.reduce((n, w) => n + w.n, 0)).toBe(4);
      expect(second).toEqual([
        { user: 'u0', start: 1000, n: 2 }, // 1500, 1800
        { user: 'u1', start: 1000, n: 1 }, // 1600
        { user: 'u2', start: 1000, n: 1 }, // 1700
      ]);
      expect(await runtime.deadLetters()).toEqual([]);
      for (const s of runtime.report().stages) expect(s.metrics.fifoRuleViolations, s.name).toBe(0);
    } finally {
      await runtime.stop();
    }
  }, 120_000);

  it('gives the embedded runtime\'s windows, step by step, for the same arrivals per partition and clock', async () => {
    // [processing time, source partition, event times]: partitions in the embedded runtime's round-robin order.
    const steps: [number, number, number[]][] = [
      [0, 0, [100, 200]],
      [0, 1, [300, 1500]],
      [1000, 2, [1700]], // 0, 1 (data at 0) and 3 (none) are idle: [0, 1000) fires at 1699
      [1100, 3, [2500]],
      [1200, 0, [2600]],
      [1300, 1, [2700]],
      [1400, 2, [3500]], // all active again: min 2499, [1000, 2000) fires
    ];
    const embeddedClock = new ManualClock(0);
    const a = new CollectSink<Count>();
    const embedded = new EmbeddedRuntime(clicksJob(), { clock: embeddedClock, sinks: { out: a as Sink<any> }, sourceBatchSize: 100 });
    await embedded.start();
    const awsClock = new ManualClock(0);
    const b = new CollectSink<Count>();
    const runtime = new LocalAwsRuntime(clicksJob(), { env, runId: unique('same').slice(-20).replace(/^[^a-z]+/, 'r'), clock: awsClock, sinks: { out: b as Sink<any> } });
    await runtime.start();
    const nextKey = [0, 1, 2, 3].map(keysFor);
    const rows = (sink: CollectSink<Count>) => sink.records.map((r) => JSON.stringify(r)).sort();
    const seen: number[] = [];
    try {
      for (const [at, p, ts] of steps) {
        const clicks = ts.map((t) => ({ user: `u${t % 3}`, ts: t }));
        embeddedClock.set(at);
        expect(embedded.offer('clicks', clicks)).toEqual({ ok: true });
        while (await embedded.step()) {}
        awsClock.set(at);
        const event = { version: '2.0', rawPath: '/streams/clicks/events', headers: { 'content-type': 'application/json', 'idempotency-key': nextKey[p]() }, requestContext: { http: { method: 'POST' }, requestId: unique('r') }, body: JSON.stringify(clicks), isBase64Encoded: false };
        expect((await runtime.ingest!(event as unknown as APIGatewayProxyEventV2)).statusCode).toBe(202);
        await runtime.drained();
        expect(rows(b), `after the arrival at ${at} on partition ${p}`).toEqual(rows(a));
        seen.push(a.records.length);
      }
      expect(seen).toEqual([0, 0, 3, 3, 3, 3, 5]);
    } finally {
      await runtime.stop();
      await embedded.close();
    }
  }, 120_000);

  it('fire windows over a union when one of its ingestion streams is silent (its partitions are probed too)', async () => {
    const clock = new ManualClock(0);
    const sink = new CollectSink<Count>();
    const job = new Job('idle-union', { parallelism: 2, maxParallelism: MAX_P });
    const idle = WatermarkStrategies.boundedOutOfOrderness(0, { idleTimeoutMs: 1000 });
    const web = job.ingest<Click>('web', { timestamp: (c) => c.ts, watermark: idle });
    const app = job.ingest<Click>('app', { timestamp: (c) => c.ts, watermark: idle });
    web
      .union(app)
      .keyBy((c) => c.user)
      .window(Windows.tumbling(1000))
      .process<Count>((els, { key, window }, out) => out.emit({ user: key as string, start: window.start, n: els.length }))
      .sinkTo(Sinks.collect(), 'out');
    const runtime = new LocalAwsRuntime(job, { env, runId: unique('union').slice(-20).replace(/^[^a-z]+/, 'r'), clock, sinks: { out: sink as Sink<any> } });
    await runtime.start();
    const post = async (...ts: number[]) => {
      const event = { version: '2.0', rawPath: '/streams/web/events', headers: { 'content-type': 'application/json' }, requestContext: { http: { method: 'POST' }, requestId: unique('r') }, body: JSON.stringify(ts.map((t) => ({ user: 'u', ts: t }))), isBase64Encoded: false };
      expect((await runtime.ingest!(event as unknown as APIGatewayProxyEventV2)).statusCode).toBe(202);
      await runtime.drained();
    };
    try {
      // Round-robin: web partitions 0 and 1 both get data; "app" gets nothing, ever.
      await post(100);
      await post(200, 1500);
      await post(1600);
      expect(sink.records).toEqual([]);
      clock.set(1000);
      await post(1700);
      await post(1800);
      expect(sink.records).toEqual([{ user: 'u', start: 0, n: 2 }]);
    } finally {
      await runtime.stop();
    }
  }, 120_000);
});
