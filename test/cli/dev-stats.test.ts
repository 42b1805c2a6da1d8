/** `sluice dev`'s live view and stop summary count what the endpoint refused (per event), not only the runtime's rejections. */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { describeRejections } from '../../lib/cli/dev.ts';
import { DevMonitor } from '../../lib/cli/dev-monitor.ts';
import { liveBlock, liveLine } from '../../lib/cli/dev-live-view.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { startIngestServer } from '../../lib/local/ingest-server.ts';

describe('sluice dev: rejected counts', () => {
  it('shows the endpoint rejections (400 and 429 per event, unread requests apart) in the live table and the summary line', async () => {
    const job = new Job('count', { parallelism: 1 });
    job.ingest<{ t: number }>('events', { timestamp: (e) => e.t }).sinkTo(Sinks.collect());
    const runtime = new EmbeddedRuntime(job);
    await runtime.start();
    const server = await startIngestServer(runtime, { port: 0, maxQueuedRecords: 4 });
    try {
      const post = (body: string, type = 'application/json') => fetch(`${server.url}/streams/events/events`, { method: 'POST', headers: { 'content-type': type }, body });
      expect((await post(JSON.stringify([{ t: 1 }, { t: 'x' }, {}]))).status).toBe(202);
      expect((await post(JSON.stringify([{ t: 2 }, { t: 3 }, { t: 4 }, { t: 5 }]))).status).toBe(429);
      expect((await post('nope', 'text/plain')).status).toBe(415);
      const monitor = new DevMonitor({ job: job.name, url: () => server.url, startedAt: Date.now(), runtime, rejections: () => server.rejections() });
      const snapshot = monitor.snapshot();
      const counters = /\d+ records ingested, 6 rejected \(2 invalid, 4 over the bounds \(429\)\), 1 request refused unread \(400\/413\/415\), 0 dead letters, 0 late dropped, queued \d+, lag /;
      expect(liveBlock(snapshot)[0]).toMatch(counters);
      expect(liveLine(snapshot)).toMatch(counters);
      expect(snapshot.rejected).toEqual({ invalid: 2, overBounds: 4, requestsRefused: 1 });
      expect(describeRejections(runtime.stats(), server.rejections())).toBe('6 rejected (2 invalid, 4 over the bounds (429)), 1 request refused unread (400/413/415)');
      expect(describeRejections(runtime.stats())).toBe('0 rejected');
    } finally {
      await server.close();
    }
  });
});
