/**
 * Partitions on SQS FIFO: sending outbox envelopes to the stage queues and decoding
 * received messages back into envelopes (body formats in sqs-codec.ts).
 *
 * - Envelopes for the same target partition (MessageGroupId) are packed, in outbox
 *   order, into messages of at most maxMessageBytes (compressed when that pays).
 * - MessageDeduplicationId is a hash of the envelopes' (channel, target, seq), so a
 *   redelivered outbox repeats its ids and SQS drops copies within 5 minutes; after
 *   that the consumer drops them by its per-channel high-water mark.
 * - Order within a group must survive partial SendMessageBatch failures (SQS does not
 *   promise that later entries of a group fail with an earlier one), so an ordered send
 *   puts at most one message per group in flight: round r sends the r-th message of
 *   every group, retrying its failed entries before round r+1 starts.
 * - A request holds at most 10 entries and maxMessageBytes in total (SQS's batch limit
 *   equals its message limit).
 * - An envelope too large for one message goes to the blob store (claim check) and the
 *   message names its key; spill objects are immutable and expire by a bucket lifecycle rule.
 *
 * Accounting ('sqs'): requests, messages (items), payload bytes, and billed 64 KB chunks
 * as estimatedWriteUnits (sends) / estimatedReadUnits (other calls).
 */
import { gunzipSync, gzipSync } from 'node:zlib';
import { SendMessageBatchCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { PhysicalPlan } from '../../graph/compile.ts';
import type { BlobStore } from '../../checkpoint/storage.ts';
import { deadLetterId, type Envelope } from '../../transport/envelope.ts';
import { AwsAccounting } from '../cost/accounting.ts';
import { decodeValue } from '../dynamodb/dynamodb-layout.ts';
import type { QueueResolver } from './sqs-queues.ts';
import * as C from './sqs-codec.ts';
import { EnvelopeTooLargeError, mapSqsError, MessageDecodeError, SqsSendError } from '../transport-errors.ts';

export interface SqsTransportOptions {
  readonly sqs: SQSClient;
  readonly job: string;
  readonly queues: QueueResolver;
  readonly accounting?: AwsAccounting;
  /** Largest message (and SendMessageBatch payload); default 256 KiB, at most 1 MiB. */
  readonly maxMessageBytes?: number;
  /** gzip bodies when that makes them at least 10% smaller (default true). */
  readonly compress?: boolean;
  /** Where envelopes too large for a message go; without it they fail with EnvelopeTooLargeError. */
  readonly blobs?: BlobStore;
  /** Attempts for entries SQS refused transiently (default 5). */
  readonly maxSendAttempts?: number;
}

export interface OutgoingMessage {
  readonly groupId: string;
  readonly body: string;
  readonly bytes: number;
  readonly dedupId: string;
}

export type SendOutcome =
  | { readonly ok: true; readonly sequenceNumber?: string }
  /** definite: SQS certainly did not enqueue it; otherwise the outcome is unknown (a lost answer). */
  | { readonly ok: false; readonly code: string; readonly message: string; readonly senderFault: boolean; readonly definite: boolean };

/** A received message as both Lambda's SQSRecord and ReceiveMessage provide it. */
export interface ReceivedMessage {
  readonly messageId: string;
  readonly body: string;
  readonly attributes: { readonly SequenceNumber?: string; readonly MessageGroupId?: string };
}

const NOT_ATTEMPTED: SendOutcome = { ok: false, code: 'NotAttempted', message: 'not sent: an earlier message of its group failed', senderFault: false, definite: true };

export class SqsTransport {
  readonly accounting: AwsAccounting;
  readonly maxMessageBytes: number;
  private readonly compress: boolean;
  private readonly maxAttempts: number;

  constructor(private readonly options: SqsTransportOptions) {
    this.accounting = options.accounting ?? new AwsAccounting();
    this.maxMessageBytes = options.maxMessageBytes ?? C.DEFAULT_MAX_MESSAGE_BYTES;
    if (!(this.maxMessageBytes >= 1024 && this.maxMessageBytes <= C.MAX_MESSAGE_BYTES)) {
      throw new RangeError(`maxMessageBytes: expected 1024 to ${C.MAX_MESSAGE_BYTES}, received ${this.maxMessageBytes}`);
    }
    this.compress = options.compress ?? true;
    this.maxAttempts = options.maxSendAttempts ?? 5;
  }

  get queues(): QueueResolver {
    return this.options.queues;
  }

  // ---- channel envelopes --------------------------------------------------------------

  /** Deliver channel envelopes (in outbox order) to their target stages' queues. Throws when any did not go out. */
  async sendEnvelopes(plan: PhysicalPlan, envelopes: readonly Envelope[]): Promise<void> {
    const byStage = new Map<number, Map<number, Envelope[]>>();
    for (const env of envelopes) {
      const stage = plan.edges[env.edge].toStage;
      let parts = byStage.get(stage);
      if (!parts) byStage.set(stage, (parts = new Map()));
      let list = parts.get(env.toPartition);
      if (!list) parts.set(env.toPartition, (list = []));
      list.push(env);
    }
    await Promise.all(
      [...byStage].map(async ([stage, parts]) => {
        const messages: OutgoingMessage[] = [];
        for (const [partition, list] of parts) messages.push(...(await this.packEnvelopes(stage, partition, list)));
        await this.sendAll(await this.options.queues.queueUrl(stage), messages, true);
      }),
    );
  }

  /** The messages for one target partition (spilling oversized envelopes to the blob store first). */
  async packEnvelopes(stage: number, partition: number, envelopes: readonly Envelope[]): Promise<OutgoingMessage[]> {
    const parts = envelopes.map((e) => C.encodePart(e));
    const scope = `${this.options.job}/${stage}/${partition}`;
    const groupId = String(partition);
    const out: OutgoingMessage[] = [];
    for (const p of C.pack(parts, C.FRAMES.envelopes, this.maxMessageBytes, this.compress)) {
      const dedupId = C.dedupId(scope, envelopes.slice(p.start, p.end).map(C.envelopeId));
      if (p.body !== undefined) {
        out.push({ groupId, body: p.body, bytes: p.bytes, dedupId });
        continue;
      }
      const env = envelopes[p.start];
      if (!this.options.blobs) throw new EnvelopeTooLargeError(env.channel, env.seq, p.bytes, this.maxMessageBytes);
      // Deterministic key and bytes: a redelivery writes the same object again, which the store accepts.
      const key = `spill/${this.options.job}/${stage}/${partition}/${dedupId}.json.gz`;
      await this.options.blobs.put(key, gzipSync(C.FRAMES.envelopes(parts[p.start])));
      const body = C.spillBody(key);
      out.push({ groupId, body, bytes: Buffer.byteLength(body), dedupId });
    }
    return out;
  }

  /** Envelopes of a received message (stage: the queue's stage; its group is the partition). */
  async decode(plan: PhysicalPlan, stage: number, msg: ReceivedMessage): Promise<Envelope[]> {
    const body = C.decodeBody(msg.body, msg.messageId);
    switch (body.k) {
      case 'e':
        return body.e;
      case 's': {
        if (!this.options.blobs) throw new MessageDecodeError(msg.messageId, `the envelope is in the blob store at ${body.key}, and no blob store is configured`);
        const bytes = await this.options.blobs.get(body.key);
        if (!bytes) throw new MessageDecodeError(msg.messageId, `spilled envelope ${body.key} is missing from the blob store (expired?)`);
        const inner = decodeValue(gunzipSync(bytes).toString('utf8')) as { e: Envelope[] };
        return inner.e;
      }
      case 'i': {
        const seqNo = msg.attributes.SequenceNumber;
        const partition = Number(msg.attributes.MessageGroupId);
        if (seqNo === undefined || !Number.isInteger(partition)) throw new MessageDecodeError(msg.messageId, 'an ingest message needs SequenceNumber and a numeric MessageGroupId (FIFO queue)');
        return [C.sourceEnvelope(plan, stage, partition, body, seqNo, msg.messageId)];
      }
      case 'd':
        throw new MessageDecodeError(msg.messageId, 'a dead letter belongs on a dead-letter queue, not on a stage queue');
    }
  }

  // ---- dead letters and end of input ----------------------------------------------------

  /** Park records and timer callbacks on the stage's dead-letter queue, with their error. */
  async sendDeadLetters(letters: readonly C.DeadLetterMessage[]): Promise<void> {
    if (!letters.length) return;
    const byStage = new Map<number, OutgoingMessage[]>();
    for (const d of letters) {
      let fin = C.finishBody(C.encodePart({ v: 1, k: 'd', ...d }), this.compress);
      if (fin.bytes > this.maxMessageBytes) {
        // The error and position are what matter; a huge record is summarised.
        const record = { $omitted: `record of ${fin.bytes} bytes encoded, over the message limit` };
        fin = C.finishBody(C.encodePart({ v: 1, k: 'd', ...d, record }), this.compress);
      }
      // Per partition: a channel id and its sequence numbers repeat across the consumers of a hash edge.
      const dedupId = C.dedupId(`${d.job}/${d.stage}/${d.partition}/dead-letter`, [deadLetterId(d)]);
      let list = byStage.get(d.stage);
      if (!list) byStage.set(d.stage, (list = []));
      list.push({ groupId: String(d.partition), body: fin.body, bytes: fin.bytes, dedupId });
    }
    for (const [stage, messages] of byStage) await this.sendAll(await this.options.queues.deadLetterQueueUrl(stage), messages, true);
  }

  /** Close event time on every partition of a source stage (a bounded input has ended). */
  async sendEndOfInput(stage: number, source: string, partitions: number, tag = 'end'): Promise<void> {
    const body = C.endOfInputBody(source);
    const messages = Array.from({ length: partitions }, (_, p) => ({ groupId: String(p), body, bytes: Buffer.byteLength(body), dedupId: C.dedupId(`${this.options.job}/${stage}/${p}`, [`end:${source}:${tag}`]) }));
    await this.sendAll(await this.options.queues.queueUrl(stage), messages, true);
  }

  // ---- sending ------------------------------------------------------------------------

  /** send(), throwing SqsSendError when any message did not certainly go out. */
  async sendAll(queueUrl: string, messages: readonly OutgoingMessage[], ordered: boolean): Promise<void> {
    const outcomes = await this.send(queueUrl, messages, ordered);
    const failed = outcomes.filter((o): o is Extract<SendOutcome, { ok: false }> => !o.ok && o.code !== 'NotAttempted');
    if (failed.length) throw new SqsSendError(queueUrl, failed.map((f) => ({ code: f.code, message: f.message, senderFault: f.senderFault })), failed.every((f) => !f.senderFault));
  }

  /**
   * Send messages to one queue; one outcome per message, never throwing for refused
   * entries. `ordered`: each group's messages go out in order, a later one only after
   * the earlier ones were accepted.
   */
  async send(queueUrl: string, messages: readonly OutgoingMessage[], ordered: boolean): Promise<SendOutcome[]> {
    const outcomes: (SendOutcome | undefined)[] = new Array(messages.length);
    if (!ordered) {
      await this.sendWave(queueUrl, messages, [...messages.keys()], outcomes);
      return outcomes.map((o) => o ?? NOT_ATTEMPTED);
    }
    const groups = new Map<string, number[]>();
    messages.forEach((m, i) => {
      const g = groups.get(m.groupId);
      if (g) g.push(i);
      else groups.set(m.groupId, [i]);
    });
    for (let round = 0; ; round++) {
      const wave: number[] = [];
      for (const g of groups.values()) if (g.length > round && (round === 0 || outcomes[g[round - 1]]?.ok)) wave.push(g[round]);
      if (!wave.length) break;
      await this.sendWave(queueUrl, messages, wave, outcomes);
    }
    return outcomes.map((o) => o ?? NOT_ATTEMPTED);
  }

  private async sendWave(queueUrl: string, messages: readonly OutgoingMessage[], indices: readonly number[], outcomes: (SendOutcome | undefined)[]): Promise<void> {
    let pending = [...indices];
    for (let attempt = 0; pending.length && attempt < this.maxAttempts; attempt++) {
      if (attempt) await sleep(Math.min(2000, 50 * 2 ** attempt) * (0.5 + Math.random() / 2));
      const retry: number[] = [];
      await Promise.all(this.requests(messages, pending).map((call) => this.sendRequest(queueUrl, messages, call, outcomes, retry)));
      pending = retry;
    }
  }

  /** Split into requests of at most 10 entries and maxMessageBytes of payload. */
  private requests(messages: readonly OutgoingMessage[], indices: readonly number[]): number[][] {
    const out: number[][] = [];
    let cur: number[] = [];
    let bytes = 0;
    for (const i of indices) {
      const b = messages[i].bytes;
      if (cur.length === 10 || (cur.length && bytes + b > this.maxMessageBytes)) {
        out.push(cur);
        cur = [];
        bytes = 0;
      }
      cur.push(i);
      bytes += b;
    }
    if (cur.length) out.push(cur);
    return out;
  }

  private async sendRequest(queueUrl: string, messages: readonly OutgoingMessage[], call: readonly number[], outcomes: (SendOutcome | undefined)[], retry: number[]): Promise<void> {
    const payload = call.reduce((n, i) => n + messages[i].bytes, 0);
    const entries = call.map((i) => ({ Id: `m${i}`, MessageBody: messages[i].body, MessageGroupId: messages[i].groupId, MessageDeduplicationId: messages[i].dedupId }));
    let out;
    try {
      out = await this.options.sqs.send(new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: entries }));
    } catch (e) {
      this.accounting.record('sqs', 'SendMessageBatch', { requests: 1, errors: 1 });
      const err = mapSqsError(e, 'SendMessageBatch', queueUrl) as ReturnType<typeof mapSqsError> & { throttled?: boolean };
      // A throttled or malformed request was not applied; any other failure may have been.
      const definite = err.throttled === true || !err.retryable;
      for (const i of call) outcomes[i] = { ok: false, code: (e as { name?: string }).name ?? 'Error', message: err.message, senderFault: !err.retryable, definite };
      if (err.retryable) retry.push(...call);
      return;
    }
    this.accounting.record('sqs', 'SendMessageBatch', { requests: 1, items: out.Successful?.length ?? 0, bytes: payload, estimatedWriteUnits: C.billedChunks(payload) });
    for (const s of out.Successful ?? []) outcomes[Number(s.Id!.slice(1))] = { ok: true, sequenceNumber: s.SequenceNumber };
    for (const f of out.Failed ?? []) {
      const i = Number(f.Id!.slice(1));
      outcomes[i] = { ok: false, code: f.Code ?? 'Unknown', message: f.Message ?? '', senderFault: f.SenderFault === true, definite: true };
      if (!f.SenderFault) retry.push(i);
    }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
