/**
 * Opt-in load shedding on an ingestion stream (SourceOptions.shed) at the embedded HTTP
 * endpoint: never without a policy; under its bounds nothing is shed; past them arriving
 * events are dropped by the policy (newest, a deterministic sample, a priority), each named
 * in its request's answer with its index and reason and counted per stream and reason in
 * the stats; what was accepted is processed exactly once. Bad policies fail the job's build.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DevMonitor } from '../../lib/cli/dev-monitor.ts';
import { countersPhrase } from '../../lib/cli/dev-live-view.ts';
import { MetricsFile } from '../../lib/cli/dev-metrics.ts';
import { publishFile } from '../../lib/cli/publish.ts';
import { CollectSink, type Sink } from '../../lib/api/sinks.ts';
import type { LoadShedding } from '../../lib/api/sources.ts';
import { Job } from '../../lib/api/stream.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { startIngestServer } from '../../lib/local/ingest-server.ts';

interface Ev {
  id: number;
  level: number;
}

function job(shed?: LoadShedding<Ev>) {
  const j = new Job('shed', { parallelism: 1 });
  j.ingest<Ev>('events', { timestamp: (e) => e.id, ...(shed ? { shed } : {}) }).sinkTo(new CollectSink<Ev>() as Sink<any>, 'out');
  return j;
}

async function endpoint(shed?: LoadShedding<Ev>) {
  const out = new CollectSink<Ev>();
  const runtime = new EmbeddedRuntime(job(shed), { sinks: { out: out as Sink<any> } });
  await runtime.start();
  const server = await startIngestServer(runtime, { port: 0 });
  let next = 0;
  const post = async (n: number, level = (i: number) => i % 3) => {
    const events = Array.from({ length: n }, (_, i) => ({ id: next + i, level: level(next + i) }));
    next += n;
    const res = await fetch(`${server.url}/streams/events/events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(events) });
    return { status: res.status, body: (await res.json()) as { accepted: number; rejected: unknown[]; shed?: { index: number; reason: string }[]; message: string } };
  };
  const drain = async () => {
    while (await runtime.step()) {}
  };
  const close = async () => {
    await server.close();
    runtime.stop();
    await runtime.close();
  };
  return { runtime, out, post, drain, close, url: server.url };
}

describe('load shedding at the embedded endpoint', () => {
  it("'newest': under the bound everything is taken; past it every arriving event is shed, named and counted; taken events come out once", async () => {
    const e = await endpoint({ whenQueued: 10, drop: 'newest' });
    try {
      expect((await e.post(6)).body).toMatchObject({ accepted: 6, rejected: [] });
      expect((await e.post(6)).body).toMatchObject({ accepted: 6 }); // 6 queued < 10: taken, now 12
      const shed = await e.post(4);
      expect(shed.status).toBe(202);
      expect(shed.body).toEqual({ accepted: 0, rejected: [], shed: [0, 1, 2, 3].map((index) => ({ index, reason: 'newest' })), message: 'accepted 0 of 4 events; 4 shed (load shedding: newest)' });
      expect(e.runtime.stats().shed).toEqual({ events: { newest: 4 } });
      // The same count in what dev shows (GET /stats, status, the live view, the dashboard) and its metrics file.
      const snapshot = new DevMonitor({ job: 'shed', url: () => e.url, startedAt: 0, runtime: e.runtime }).snapshot();
      expect(snapshot).toMatchObject({ shed: { events: { newest: 4 } }, shedTotal: 4 });
      expect(countersPhrase(snapshot)).toContain('0 late dropped, 4 shed by load shedding (events: newest 4), queued');
      const metricsPath = join(mkdtempSync(join(tmpdir(), 'sluice-shed-m-')), 'emf.jsonl');
      new MetricsFile(metricsPath, 'shed').write(snapshot);
      const emf = readFileSync(metricsPath, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(emf.filter((m) => m.eventsShed !== undefined).map((m) => [m.stream ?? '-', m.reason ?? '-', m.eventsShed])).toEqual([
        ['-', '-', 4],
        ['events', 'newest', 4],
      ]);
      await e.drain(); // the queue empties: under the bound again
      expect((await e.post(3)).body).toMatchObject({ accepted: 3 });
      await e.drain();
      expect(e.out.records.map((r) => r.id)).toEqual([...Array(12).keys(), 16, 17, 18]);
    } finally {
      await e.close();
    }
  });

  it('{ keep: 0.25 }: a deterministic quarter of the arriving events while over the bound', async () => {
    const e = await endpoint({ whenQueued: 1, drop: { keep: 0.25 } });
    try {
      await e.post(1);
      const r = await e.post(8);
      expect(r.body.accepted).toBe(2);
      expect(r.body.shed!.map((s) => s.index)).toEqual([0, 1, 2, 4, 5, 6]);
      expect(new Set(r.body.shed!.map((s) => s.reason))).toEqual(new Set(['sample']));
      expect(e.runtime.stats().shed).toEqual({ events: { sample: 6 } });
    } finally {
      await e.close();
    }
  });

  it('{ priority, keepAtLeast }: keeps the events whose priority is high enough', async () => {
    const e = await endpoint({ whenQueued: 1, drop: { priority: (ev) => ev.level, keepAtLeast: 2 } });
    try {
      await e.post(1);
      const r = await e.post(6); // ids 1..6, levels 1, 2, 0, 1, 2, 0
      expect(r.body.accepted).toBe(2);
      expect(r.body.shed!.map((s) => s.index)).toEqual([0, 2, 3, 5]);
      await e.drain();
      expect(e.out.records.map((x) => x.id)).toEqual([0, 2, 5]);
      expect(e.runtime.stats().shed).toEqual({ events: { priority: 4 } });
    } finally {
      await e.close();
    }
  });

  it('sluice publish reports the shed lines of a file (accepted + rejected + shed = sent)', async () => {
    const e = await endpoint({ whenQueued: 5, drop: 'newest' });
    try {
      const dir = mkdtempSync(join(tmpdir(), 'sluice-shed-'));
      const file = join(dir, 'events.jsonl');
      writeFileSync(file, Array.from({ length: 12 }, (_, i) => JSON.stringify({ id: i, level: 0 })).join('\n') + '\n');
      const result = await publishFile({ url: e.url, stream: 'events', file, batchSize: 4 });
      expect(result).toMatchObject({ sent: 12, accepted: 8, rejected: [] });
      expect(result.shed).toEqual([9, 10, 11, 12].map((line) => ({ line, reason: 'newest' })));
    } finally {
      await e.close();
    }
  });

  it('is never on by default: without a policy nothing is shed however full the queue', async () => {
    const e = await endpoint();
    try {
      for (let i = 0; i < 5; i++) expect((await e.post(50)).body.shed).toBeUndefined();
      expect(e.runtime.stats().shed).toEqual({});
    } finally {
      await e.close();
    }
  });

  it('a policy that cannot work fails the build, naming what was expected', () => {
    expect(() => job({ drop: 'newest' })).toThrow(/shed\.whenQueued \(records\) and\/or shed\.whenLagMs \(ms\), positive integers/);
    expect(() => job({ whenQueued: 10, drop: { keep: 1.5 } })).toThrow(/shed\.drop as 'newest', \{ keep: r \} with 0 < r < 1/);
    const j = new Job('file-shed');
    expect(() => j.fromItems('x', [1], { shed: { whenQueued: 1, drop: 'newest' } })).toThrow(/shed only on an ingestion stream \(job\.ingest\)/);
  });
});
