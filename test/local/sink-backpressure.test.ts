/**
 * Stream sinks honour back-pressure: the runtime waits for a batch's write callback before
 * it counts the batch delivered (clears the outbox) and goes on, so a slow reader bounds
 * what sits in the process's buffers; a stream error fails the run instead of the process.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { JsonLinesFileSink, SinkWriteError, StdoutSink } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';

/** A reader that takes each chunk only when the test releases it. */
class HeldWritable extends Writable {
  readonly chunks: string[] = [];
  private held?: () => void;
  private arrived?: () => void;
  maxBuffered = 0;
  constructor() {
    super({ highWaterMark: 1024, decodeStrings: false });
  }
  override _write(chunk: string, _enc: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.chunks.push(String(chunk));
    this.maxBuffered = Math.max(this.maxBuffered, this.writableLength);
    this.held = () => callback();
    this.arrived?.();
  }
  /** Resolves once a write is held (now or later). */
  nextWrite(): Promise<void> {
    if (this.held) return Promise.resolve();
    return new Promise((resolve) => (this.arrived = resolve));
  }
  get holding(): boolean {
    return this.held !== undefined;
  }
  release(): void {
    const cb = this.held!;
    this.held = undefined;
    this.arrived = undefined;
    cb();
  }
}

/** Counts outbox clears: the runtime's "delivered" for a committed batch. */
class CountingBackend extends InMemoryStateBackend {
  cleared = 0;
  override clearOutbox(...args: Parameters<InMemoryStateBackend['clearOutbox']>): ReturnType<InMemoryStateBackend['clearOutbox']> {
    this.cleared++;
    return super.clearOutbox(...args);
  }
}

/** Many event-loop turns: time for a runtime that does not wait to run ahead. */
async function spin(turns = 200): Promise<void> {
  for (let i = 0; i < turns; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

const N = 20_000;

function job() {
  const j = new Job('slow-reader', { parallelism: 1 });
  j.fromItems(
    'in',
    Array.from({ length: N }, (_, i) => i),
  )
    .map((x) => ({ x }))
    .sinkTo(new StdoutSink<{ x: number }>(), 'out');
  return j;
}

describe('stdout sink over a slow reader', () => {
  it('waits for each write callback before counting the batch delivered and reading more', async () => {
    const reader = new HeldWritable();
    const backend = new CountingBackend();
    const sink = new StdoutSink<{ x: number }>(undefined, () => reader);
    // Small source chunks and batches: many deliveries, each one held.
    const runtime = new EmbeddedRuntime(job(), { backend, sinks: { out: sink }, sourceBatchSize: 1000, batchRecords: 1000 });
    let done = false;
    const run = runtime.run().finally(() => (done = true));

    let deliveries = 0;
    let largestBatch = 0;
    while (!done) {
      await Promise.race([reader.nextWrite(), run]);
      if (done) break;
      deliveries++;
      const clearedBefore = reader.chunks.length;
      const cleared = backend.cleared;
      const sourced = runtime.stats().sourceRecords;
      await spin();
      // Held: one write outstanding, nothing more written, not counted delivered, the source not read on.
      expect(reader.chunks.length).toBe(clearedBefore);
      expect(backend.cleared).toBe(cleared);
      expect(runtime.stats().sourceRecords).toBeLessThanOrEqual(sourced + 2000);
      largestBatch = Math.max(largestBatch, reader.chunks.at(-1)!.length);
      reader.release();
      await spin(5);
      if (!done) expect(backend.cleared).toBeGreaterThan(cleared);
    }
    await run;
    expect(deliveries).toBeGreaterThanOrEqual(N / 1000);
    // Never more than one batch in the stream's buffer.
    expect(reader.maxBuffered).toBeLessThanOrEqual(largestBatch);
    const lines = reader.chunks.join('').split('\n').filter(Boolean);
    expect(lines.map((l) => JSON.parse(l).x)).toEqual(Array.from({ length: N }, (_, i) => i));
  });

  it('a stream error fails the run with the sink named; nothing is counted delivered', async () => {
    const broken = new Writable({
      write(_chunk, _enc, callback) {
        callback(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' }));
      },
    });
    const backend = new CountingBackend();
    const sink = new StdoutSink<{ x: number }>(undefined, () => broken);
    const runtime = new EmbeddedRuntime(job(), { backend, sinks: { out: sink } });
    const err = await runtime.run().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SinkWriteError);
    expect((err as Error).message).toBe('stdout sink: write failed: write EPIPE');
    expect(backend.cleared).toBe(0);
    // A later write fails the same way, at once.
    await expect(sink.write({ producer: 'p', seq: 99, records: [{ x: 1 }] })).rejects.toBeInstanceOf(SinkWriteError);
  });
});

describe('JSON-lines file sink', () => {
  it("a write resolves only once the OS has the batch's lines", async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'sluice-jsonl-')), 'out', 'o.jsonl');
    const sink = new JsonLinesFileSink<{ x: number }>(path);
    sink.open();
    for (let seq = 1; seq <= 3; seq++) {
      const written = sink.write({ producer: 'p', seq, records: [{ x: seq }, { x: seq * 10 }] });
      expect(written).toBeInstanceOf(Promise);
      await written;
      const lines = readFileSync(path, 'utf8').split('\n').filter(Boolean);
      expect(lines).toHaveLength(seq * 2);
    }
    await sink.close();
  });

  it('a write after a failed one is retried, not dropped as a redelivery', async () => {
    let fail = true;
    const out = new Writable({
      write(chunk, _enc, callback) {
        callback(fail ? new Error('EIO') : null);
      },
    });
    const sink = new StdoutSink<number>(String, () => out);
    await expect(sink.write({ producer: 'p', seq: 1, records: [1] })).rejects.toThrow(/EIO/);
    fail = false;
    // The stream stays failed: the same batch again is a write (rejected), not a silent duplicate.
    await expect(sink.write({ producer: 'p', seq: 1, records: [1] })).rejects.toBeInstanceOf(SinkWriteError);
    expect(sink.duplicatesDropped).toBe(0);
  });
});
