/**
 * Delivering a committed outbox, the same on both runtimes, behind four ports: channel
 * envelopes to the downstream partitions, dead letters to the dead-letter store, sink
 * deliveries to the sinks, barrier acks to the checkpoint coordinator.
 *
 * The order: channels, dead letters and sinks start together, each port taking its
 * entries in outbox order (sinks one delivery at a time: a sink drops a delivery at or
 * below its producer's high-water mark); the acks go only once all three are done, so the
 * coordinator commits an epoch (transactional sinks included) only after everything
 * before its ack is out and every letter of the epoch is stored. On the embedded runtime
 * the channel and dead-letter ports finish synchronously; nothing is awaited unless a
 * port returns a promise.
 *
 * A sink that refuses some records of a delivery (SinkRecordsRejectedError) writes the
 * rest; the refused records are parked as dead letters with the sink's error (operator =
 * the sink, channel `sink:<producer>`), on both runtimes: the contract parks a record
 * that cannot be processed with its error, it neither drops it nor stops the job for it,
 * and retrying a delivery the sink refused would fail the same way forever.
 */
import { SinkRecordsRejectedError } from '../api/sinks.ts';
import { type BarrierAck, type DeadLetter, type Envelope, type OutboxEntry, outboxEpochAt, type SinkDelivery } from '../transport/envelope.ts';

/** A dead letter and the checkpoint epoch that covers it (outboxEpochAt). */
export interface EpochDeadLetter {
  readonly letter: DeadLetter;
  readonly epoch: number;
}

/** Where one partition's outbox goes. A port returns a promise only when it has to wait. */
export interface OutboxPorts {
  /** Channel envelopes to their target partitions, in outbox order. */
  channels(envelopes: readonly Envelope[]): Promise<void> | void;
  /** Dead letters to the dead-letter store (each once: a redelivered outbox may carry one again). */
  deadLetters(letters: readonly EpochDeadLetter[]): Promise<void> | void;
  /** One delivery to its sink; throws SinkRecordsRejectedError for records the sink refused. */
  sink(delivery: SinkDelivery): Promise<void> | void;
  /** Barrier acks to the coordinator, after everything else of the outbox. */
  acks(acks: readonly BarrierAck[]): Promise<void> | void;
  /** A sink refused records; they are parked (deadLetters) right after this. */
  sinkRejected?(error: SinkRecordsRejectedError): void;
}

/**
 * Deliver `outbox` through `ports`; a promise only when some port returned one.
 * `lastBarrier`: the partition's after the commit of `outbox` (the epoch of what follows its last ack).
 */
export function deliverOutbox(ports: OutboxPorts, outbox: readonly OutboxEntry[], lastBarrier: number): Promise<void> | undefined {
  if (outbox.length === 0) return undefined;
  const envelopes: Envelope[] = [];
  let letters: EpochDeadLetter[] | undefined;
  let sinks: { readonly delivery: SinkDelivery; readonly at: number }[] | undefined;
  let acks: BarrierAck[] | undefined;
  for (let i = 0; i < outbox.length; i++) {
    const e = outbox[i];
    if (e.kind === 'channel') envelopes.push(e.envelope);
    else if (e.kind === 'sink') (sinks ??= []).push({ delivery: e.delivery, at: i });
    else if (e.kind === 'deadLetter') (letters ??= []).push({ letter: e.deadLetter, epoch: outboxEpochAt(outbox, i, lastBarrier) });
    else (acks ??= []).push(e.ack);
  }
  const channels = envelopes.length ? ports.channels(envelopes) : undefined;
  const stored = letters ? ports.deadLetters(letters) : undefined;
  const written = sinks ? writeSinks(ports, sinks, 0, outbox, lastBarrier) : undefined;
  const sendAcks = acks ? () => ports.acks(acks) : () => undefined;
  if (channels === undefined && stored === undefined && written === undefined) return sendAcks() ?? undefined;
  return Promise.all([channels, stored, written]).then(sendAcks);
}

type SinkEntry = { readonly delivery: SinkDelivery; readonly at: number };

/** The sink deliveries from `from` on, one after the other; a promise from the first port call that returned one. */
function writeSinks(ports: OutboxPorts, sinks: readonly SinkEntry[], from: number, outbox: readonly OutboxEntry[], lastBarrier: number): Promise<void> | undefined {
  for (let i = from; i < sinks.length; i++) {
    let written: Promise<void> | void;
    try {
      written = ports.sink(sinks[i].delivery);
    } catch (e) {
      written = Promise.reject(e);
    }
    if (written) {
      return written.then(
        () => writeSinks(ports, sinks, i + 1, outbox, lastBarrier),
        async (e: unknown) => {
          await parkRejected(ports, e, sinks[i], outbox, lastBarrier);
          await writeSinks(ports, sinks, i + 1, outbox, lastBarrier);
        },
      );
    }
  }
  return undefined;
}

/** The records a sink refused, as dead letters; any other error fails the delivery. */
function parkRejected(ports: OutboxPorts, e: unknown, s: SinkEntry, outbox: readonly OutboxEntry[], lastBarrier: number): Promise<void> | void {
  if (!(e instanceof SinkRecordsRejectedError)) throw e;
  const d = s.delivery;
  const epoch = outboxEpochAt(outbox, s.at, lastBarrier);
  const letters = e.rejected.map((r) => ({
    letter: { operator: d.sink, channel: `sink:${d.producer}`, seq: d.seq, index: r.index, record: { value: r.record, timestamp: Number.NaN }, error: r.error, attempts: 1 },
    epoch,
  }));
  ports.sinkRejected?.(e);
  return ports.deadLetters(letters);
}
