/**
 * Where a committed outbox goes in the embedded runtime (the ports of
 * lib/runtime/batch-runner-outbox.ts): channel envelopes into the target partitions'
 * queues, sink deliveries to the sinks (idempotent by producer and sequence), dead
 * letters to the dead-letter store (once each: a redelivered outbox may carry one
 * again), and barrier acks to the checkpoint driver. Fault injection may deliver an
 * entry twice.
 */
import type { Sink } from '../api/sinks.ts';
import type { Envelope } from '../transport/envelope.ts';
import { DeadLetterStore } from '../checkpoint/dead-letter-store.ts';
import type { OutboxPorts } from '../runtime/batch-runner.ts';
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

  /** The ports of stage partition `stage`/`partition`'s outbox. */
  portsFor(stage: number, partition: number): OutboxPorts {
    const faults = this.options.faults;
    const twice = () => faults?.duplicate() ?? false;
    return {
      channels: (envelopes) => {
        for (const env of envelopes) {
          this.enqueue(env);
          if (twice()) this.enqueue(env);
        }
      },
      deadLetters: (letters) => {
        for (const { letter, epoch } of letters) {
          this.deadLetters.addAt(letter, stage, partition, epoch);
          if (twice()) this.deadLetters.addAt(letter, stage, partition, epoch);
        }
      },
      sink: (delivery) => {
        const sink = this.sinks.get(delivery.sink)!;
        faultSite('sink.write');
        const written = sink.write(delivery);
        if (!twice()) return written;
        return written ? written.then(() => sink.write(delivery)) : sink.write(delivery);
      },
      acks: (acks) => {
        const hooks = this.options.checkpoints;
        if (!hooks) return;
        for (const ack of acks) {
          hooks.onAck(ack);
          if (twice()) hooks.onAck(ack);
        }
      },
    };
  }
}
