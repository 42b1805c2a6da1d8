/**
 * Delivery of a committed outbox in the embedded runtime: channel envelopes into the
 * target partitions' queues, sink deliveries to the sinks (idempotent by producer and
 * sequence), dead letters to the dead-letter store (once each: a redelivered outbox may
 * carry one again), and barrier acks to the checkpoint driver. Fault injection may
 * deliver an entry twice.
 */
import type { Sink } from '../api/sinks.ts';
import { type Envelope, type OutboxEntry, outboxEpochAt } from '../transport/envelope.ts';
import { type DeadLetterOrigin, DeadLetterStore } from '../checkpoint/dead-letter-store.ts';
import type { EmbeddedOptions } from './embedded-options.ts';
import { faultSite } from '../util/fault-sites.ts';

export class OutboxDelivery {
  /** The store of a checkpointed run (its directory's file), the one the options name, or memory. */
  readonly deadLetters: DeadLetterStore;

  constructor(
    /** The job's sinks by name (after overrides). */
    readonly sinks: ReadonlyMap<string, Sink<any>>,
    private readonly enqueue: (env: Envelope) => void,
    private readonly options: Pick<EmbeddedOptions, 'faults' | 'checkpoints' | 'deadLetters'>,
  ) {
    this.deadLetters = options.deadLetters ?? options.checkpoints?.deadLetters ?? DeadLetterStore.memory();
  }

  /**
   * Deliver the entries of `origin`'s outbox in order; a promise only when a sink's write
   * returned one (the rest follows it). A dead letter is stored before anything after it
   * (the barrier ack of its epoch among them) is delivered.
   */
  deliver(outbox: readonly OutboxEntry[], origin: DeadLetterOrigin, from = 0): Promise<void> | undefined {
    const faults = this.options.faults;
    for (let e = from; e < outbox.length; e++) {
      const entry = outbox[e];
      const times = faults?.duplicate() ? 2 : 1;
      for (let i = 0; i < times; i++) {
        switch (entry.kind) {
          case 'channel':
            this.enqueue(entry.envelope);
            break;
          case 'sink': {
            faultSite('sink.write');
            const written = this.sinks.get(entry.delivery.sink)!.write(entry.delivery);
            if (written) return this.resume(written, outbox, origin, e, i + 1 < times);
            break;
          }
          case 'deadLetter':
            this.deadLetters.add(entry.deadLetter, origin, outboxEpochAt(outbox, e, origin.runtime.lastBarrier));
            break;
          case 'ack':
            this.options.checkpoints?.onAck(entry.ack);
            break;
        }
      }
    }
    return undefined;
  }

  /** After an asynchronous sink write of entry e: its duplicate (fault injection) if due, then the entries after it. */
  private async resume(written: Promise<void>, outbox: readonly OutboxEntry[], origin: DeadLetterOrigin, e: number, again: boolean): Promise<void> {
    await written;
    if (again) {
      const entry = outbox[e] as Extract<OutboxEntry, { kind: 'sink' }>;
      await this.sinks.get(entry.delivery.sink)!.write(entry.delivery);
    }
    await this.deliver(outbox, origin, e + 1);
  }
}
