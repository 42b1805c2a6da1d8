/** What a partition buffers for one (edge, target partition) between two seals (outputs.ts). */
import { type Key, MIN_WATERMARK } from '../api/types.ts';
import type { RecordColumns } from '../transport/envelope.ts';

/** Buffers of one Outputs are numbered, so that a cached reference to one needs no pointer to it. */
let nextBufferId = 1;

/** The records for one (edge, target partition) since the last seal; sealed as the envelope's columns. */
export class ChannelBuffer implements RecordColumns {
  /**
   * Unique in the process: a sealed buffer is never reopened, a new one gets a new id.
   * Private, so that the columns compare, print and clone as the data they hold.
   */
  readonly #id = nextBufferId++;
  readonly values: unknown[] = [];
  readonly timestamps: number[] = [];
  maxTimestamp = MIN_WATERMARK;
  readonly keys: Key[] | undefined;
  readonly keyStrings: string[] | undefined;
  readonly keyGroups: number[] | undefined;

  get id(): number {
    return this.#id;
  }

  constructor(keyed: boolean) {
    this.keys = keyed ? [] : undefined;
    this.keyStrings = keyed ? [] : undefined;
    this.keyGroups = keyed ? [] : undefined;
  }
}
