/**
 * The SQS transport against fauxqs: envelopes survive the round trip exactly (watermarks
 * at infinity, characters SQS refuses, astral characters), are packed under the size
 * limit, compressed only when it pays, deduplicated by deterministic ids, spilled to S3
 * when one envelope exceeds a message, and keep their per-group order through partial
 * SendMessageBatch failures (injected by middleware; fauxqs never fails an entry by itself).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { MAX_WATERMARK, MIN_WATERMARK } from '../../lib/api/types.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import * as C from '../../lib/aws/sqs/sqs-codec.ts';
import { createStageQueues, StaticQueues, type StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { SqsTransport } from '../../lib/aws/sqs/sqs-transport.ts';
import { EnvelopeTooLargeError, SqsSendError } from '../../lib/aws/transport-errors.ts';
import { compile } from '../../lib/graph/compile.ts';
import type { Envelope } from '../../lib/transport/envelope.ts';
import { drainQueue, localClients, unique } from './helpers.ts';

const clients = localClients();
const job = new Job(unique('tr'), { parallelism: 4, maxParallelism: 16 });
job
  .ingest<{ k: string }>('in')
  .keyBy((e) => e.k)
  .process<{ k: string }>({ processElement: (e, ctx) => ctx.emit(e, 0) })
  .name('echo')
  .sinkTo(Sinks.collect());
const plan = compile(job.graph);
const edge = plan.edges.find((e) => e.toStage === 1)!;
let queues: StageQueues[];
const bucket = unique('spill').toLowerCase();

beforeAll(async () => {
  queues = await createStageQueues(clients.sqs, plan, { maxMessageBytes: C.MAX_MESSAGE_BYTES });
  await createBucket(clients.s3, bucket);
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

function transport(options: Partial<ConstructorParameters<typeof SqsTransport>[0]> = {}) {
  return new SqsTransport({ sqs: clients.sqs, job: plan.job.name, queues: new StaticQueues(queues), ...options });
}

/** Envelopes on channel `${edge}:${from}` to each target partition, seq 1..n, records made by `value`. */
function envelopes(n: number, perEnvelope: number, value: (i: number, j: number) => unknown, from = 0): Envelope[] {
  const out: Envelope[] = [];
  for (let p = 0; p < 4; p++) {
    for (let i = 0; i < n; i++) {
      const records = Array.from({ length: perEnvelope }, (_, j) => ({ value: value(i, j), timestamp: i * 10 + j, key: `k${p}` }));
      out.push({ channel: `${edge.id}:${from}`, edge: edge.id, toPartition: p, seq: i + 1, records, watermark: i === 0 ? MIN_WATERMARK : i === n - 1 ? MAX_WATERMARK : i * 10 });
    }
  }
  return out;
}

async function receivedEnvelopes(t: SqsTransport) {
  const msgs = await drainQueue(clients.sqs, queues[1].url);
  const byPartition = new Map<number, Envelope[]>();
  for (const m of msgs) {
    const envs = await t.decode(plan, 1, { messageId: m.MessageId!, body: m.Body!, attributes: m.Attributes ?? {} });
    const p = Number(m.Attributes!.MessageGroupId);
    for (const e of envs) expect(e.toPartition).toBe(p);
    byPartition.set(p, [...(byPartition.get(p) ?? []), ...envs]);
  }
  return { msgs, byPartition };
}

function byTarget(envs: readonly Envelope[]): Map<number, Envelope[]> {
  const m = new Map<number, Envelope[]>();
  for (const e of envs) m.set(e.toPartition, [...(m.get(e.toPartition) ?? []), e]);
  return m;
}

describe('SqsTransport', () => {
  it('round-trips envelopes exactly, including infinite watermarks and characters SQS refuses', async () => {
    const odd = ['nul\u0000', 'bell\u0007', 'nonchar\uffff\ufffe', 'emoji 😀', 'lone \ud800 surrogate', 'tab\tnl\n', { nested: [undefined, -0, Number.NaN] }];
    const sent = envelopes(3, 5, (i, j) => ({ i, j, s: odd[(i + j) % odd.length] }));
    const t = transport();
    await t.sendEnvelopes(plan, sent);
    const { byPartition } = await receivedEnvelopes(t);
    expect(byPartition).toEqual(byTarget(sent));
  });

  it('packs many envelopes per message under the limit, and compresses only when it pays', async () => {
    const max = 8 * 1024;
    const repetitive = envelopes(40, 10, (i, j) => ({ user: 'alice', page: '/index.html', i, j }));
    const plainT = transport({ maxMessageBytes: max, compress: false });
    const plain = await plainT.packEnvelopes(1, 0, repetitive.filter((e) => e.toPartition === 0));
    const zipped = await transport({ maxMessageBytes: max }).packEnvelopes(1, 0, repetitive.filter((e) => e.toPartition === 0));
    for (const m of [...plain, ...zipped]) expect(Buffer.byteLength(m.body)).toBeLessThanOrEqual(max);
    expect(plain.length).toBeGreaterThan(1);
    expect(plain.length).toBeLessThan(40); // packed: many envelopes per message
    expect(zipped.every((m) => m.body.startsWith('gz1:'))).toBe(true);
    expect(zipped.length).toBeLessThan(plain.length / 2);

    // Random printable ASCII: gzip saves less than base64 adds.
    const random = () => Array.from(randomBytes(700), (b) => String.fromCharCode(0x23 + (b % 0x39))).join('');
    const noise = envelopes(4, 10, random).filter((e) => e.toPartition === 0);
    const noisy = await transport({ maxMessageBytes: max }).packEnvelopes(1, 0, noise);
    expect(noisy.some((m) => m.body.startsWith('gz1:'))).toBe(false);

    // Through SQS: every envelope arrives once, in order, in fewer messages than envelopes.
    const acc = new AwsAccounting();
    const t = transport({ maxMessageBytes: max, accounting: acc });
    await t.sendEnvelopes(plan, repetitive);
    const { msgs, byPartition } = await receivedEnvelopes(t);
    expect(byPartition).toEqual(byTarget(repetitive));
    expect(msgs.length).toBeLessThan(repetitive.length / 4);
    const sends = acc.get('sqs', 'SendMessageBatch');
    expect(sends.items).toBe(msgs.length);
    expect(sends.estimatedWriteUnits).toBe(sends.requests); // each request under 64 KB: one billed chunk
  });

  it('gives the same deduplication ids to the same envelopes, so SQS drops a redelivered outbox', async () => {
    const sent = envelopes(5, 3, (i, j) => `${i}.${j}`);
    const a = await transport().packEnvelopes(1, 2, sent.filter((e) => e.toPartition === 2));
    const b = await transport().packEnvelopes(1, 2, sent.filter((e) => e.toPartition === 2));
    expect(b).toEqual(a);
    const other = await transport().packEnvelopes(1, 2, envelopes(5, 3, (i, j) => `${i}.${j}`, 1).filter((e) => e.toPartition === 2));
    expect(other[0].dedupId).not.toBe(a[0].dedupId); // another producer's channel

    const t = transport();
    await t.sendEnvelopes(plan, sent);
    await t.sendEnvelopes(plan, sent); // a crash before outboxDelivered: the outbox goes out again
    const { byPartition } = await receivedEnvelopes(t);
    expect(byPartition).toEqual(byTarget(sent));
  });

  it('spills an envelope larger than a message to S3 and reads it back; without a blob store it fails clearly', async () => {
    const big = envelopes(2, 1, (i) => randomBytes(6000).toString('base64') + i).filter((e) => e.toPartition === 3);
    const blobs = new S3BlobStore({ s3: clients.s3, bucket, prefix: 'tr/' });
    const t = transport({ maxMessageBytes: 4096, blobs });
    await t.sendEnvelopes(plan, big);
    const { msgs, byPartition } = await receivedEnvelopes(t);
    expect(msgs.every((m) => JSON.parse(m.Body!).k === 's')).toBe(true);
    expect(byPartition.get(3)).toEqual(big);
    expect((await blobs.list('spill/')).length).toBe(2);
    await t.sendEnvelopes(plan, big); // redelivery: same objects, same bytes: accepted
    await drainQueue(clients.sqs, queues[1].url);

    await expect(transport({ maxMessageBytes: 4096 }).sendEnvelopes(plan, big)).rejects.toBeInstanceOf(EnvelopeTooLargeError);
  });

  it('retries entries SQS refused transiently without reordering their group, and fails clearly on sender faults', async () => {
    const { sqs } = localClients();
    let call = 0;
    let refuse: { code: string; senderFault: boolean } | undefined = { code: 'InternalError', senderFault: false };
    sqs.middlewareStack.add(
      (next) => async (args) => {
        const input = (args as { input: { Entries?: { Id: string }[] } }).input;
        if (!input.Entries || !refuse || call++ % 2 === 1 || call > 8) return next(args);
        // Refuse the first entry of every other request (early on): the rest of the request is applied.
        const [victim, ...rest] = input.Entries;
        const out = (rest.length ? await next({ ...args, input: { ...input, Entries: rest } } as typeof args) : { output: { Successful: [], $metadata: {} }, response: {} }) as { output: { Failed?: unknown[] } };
        out.output.Failed = [...(out.output.Failed ?? []), { Id: victim.Id, Code: refuse.code, SenderFault: refuse.senderFault, Message: 'injected' }];
        return out as never;
      },
      { step: 'initialize', name: 'refuseEntries' },
    );
    const acc = new AwsAccounting();
    const t = new SqsTransport({ sqs, job: plan.job.name, queues: new StaticQueues(queues), maxMessageBytes: 1024, compress: false, accounting: acc });
    const sent = envelopes(12, 2, (i, j) => `value ${i} ${j} ${'x'.repeat(100)}`);
    await t.sendEnvelopes(plan, sent);
    const { byPartition } = await receivedEnvelopes(t);
    expect(byPartition).toEqual(byTarget(sent));
    expect(acc.get('sqs', 'SendMessageBatch').requests).toBeGreaterThan(12); // one message per group in flight

    refuse = { code: 'InvalidMessageContents', senderFault: true };
    call = 0;
    const err = await t.sendEnvelopes(plan, sent.slice(0, 1)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SqsSendError);
    expect((err as SqsSendError).retryable).toBe(false);
    sqs.destroy();
  });

  it('turns an ingest message into a source envelope keyed by its sequence number', async () => {
    const t = transport();
    const body = C.FRAMES.ingest('in')([C.encodePart([5, { k: 'a' }]), C.encodePart([7, { k: 'b' }])].join(','));
    const msg = { messageId: 'm1', body, attributes: { SequenceNumber: '00000000000000000042', MessageGroupId: '1' } };
    const [env] = await t.decode(plan, 0, msg);
    expect(env).toMatchObject({ channel: `${plan.edges.find((e) => e.toStage === 0)!.id}:1`, toPartition: 1, offset: '42', watermark: MIN_WATERMARK });
    expect(env.records).toEqual([{ value: { k: 'a' }, timestamp: 5 }, { value: { k: 'b' }, timestamp: 7 }]);
    expect((await t.decode(plan, 0, msg))[0].seq).toBe(env.seq); // stable across redeliveries
    const [end] = await t.decode(plan, 0, { ...msg, body: C.endOfInputBody('in') });
    expect(end).toMatchObject({ records: [], watermark: MAX_WATERMARK });
    await expect(t.decode(plan, 0, { ...msg, body: '{"hello":1}' })).rejects.toThrow(/format 1/);
  });
});
