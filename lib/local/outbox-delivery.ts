/**
 * Delivery of a committed outbox in the embedded runtime: channel envelopes into the
 * target partitions' queues, sink deliveries to the sinks (idempotent by producer and
 * sequence), dead letters once each (a redelivered outbox may carry one again), and
 * barrier acks to the checkpoint driver. Fault injection may deliver an entry twice.
 */
import type { Sink } from '../api/sinks.ts';
import { type DeadLetter, deadLetterId, type Envelope, type OutboxEntry } from '../transport/envelope.ts';
import type { EmbeddedOptions } from './embedded-options.ts';

export class OutboxDelivery {
  readonly deadLetters: DeadLetter[] = [];
  private readonly deadLetterIds = new Set<string>();

  constructor(
    /** The job's sinks by name (after overrides). */
    readonly sinks: ReadonlyMap<string, Sink<any>>,
    private readonly enqueue: (env: Envelope) => void,
    private readonly options: Pick<EmbeddedOptions, 'faults' | 'checkpoints'>,
  ) {}

  async deliver(outbox: readonly OutboxEntry[]): Promise<void> {
    const faults = this.options.faults;
    for (const entry of outbox) {
      const times = faults?.duplicate() ? 2 : 1;
      for (let i = 0; i < times; i++) {
        switch (entry.kind) {
          case 'channel':
            this.enqueue(entry.envelope);
            break;
          case 'sink':
            await this.sinks.get(entry.delivery.sink)!.write(entry.delivery);
            break;
          case 'deadLetter': {
            const d = entry.deadLetter;
            const id = deadLetterId(d);
            if (!this.deadLetterIds.has(id)) {
              this.deadLetterIds.add(id);
              this.deadLetters.push(d);
            }
            break;
          }
          case 'ack':
            this.options.checkpoints?.onAck(entry.ack);
            break;
        }
      }
    }
  }
}
