/** What a partition buffers for one (edge, target partition) between two seals (outputs.ts). */
import { type Key, MIN_WATERMARK } from '../api/types.ts';
import type { RecordColumns } from '../transport/envelope.ts';

/** Buffers are numbered, so that a cached reference to one needs no pointer to it. */
let nextBufferId = 1;

/** Past this many records a sealed buffer lets its arrays go (a burst does not keep its room for good). */
const KEEP_ROOM = 65_536;

/**
 * The records for one (edge, target partition) since the last seal, written into arrays
 * that are kept from one seal to the next: only the first `count` entries are this
 * buffer's. Sealing copies them into exactly sized columns (the envelope's). Arrays grown
 * by push from empty for every envelope allocated about three times their final size
 * (a window's firing sends thousands of rows per envelope).
 */
export class ChannelBuffer {
  /**
   * Unique in the process: a reopened buffer gets a new one (the combining sender finds a
   * key's partials by it). Private, so that the buffer prints as the data it holds.
   */
  #id = nextBufferId++;
  /** Records written since the buffer was (re)opened. */
  count = 0;
  values: unknown[] = [];
  timestamps: number[] = [];
  maxTimestamp = MIN_WATERMARK;
  keys: Key[] | undefined;
  keyStrings: string[] | undefined;
  keyGroups: number[] | undefined;

  get id(): number {
    return this.#id;
  }

  constructor(private readonly keyed: boolean) {
    this.keys = keyed ? [] : undefined;
    this.keyStrings = keyed ? [] : undefined;
    this.keyGroups = keyed ? [] : undefined;
  }

  /** Empty, under a new id (its arrays keep their room). */
  reopen(): this {
    this.#id = nextBufferId++;
    this.count = 0;
    this.maxTimestamp = MIN_WATERMARK;
    return this;
  }

  /** The records as the envelope's columns; the buffer keeps no reference to them. */
  seal(): RecordColumns {
    const n = this.count;
    const cols = new SealedColumns(this.values.slice(0, n), this.timestamps.slice(0, n), this.maxTimestamp, this.keys?.slice(0, n), this.keyStrings?.slice(0, n), this.keyGroups?.slice(0, n));
    this.discard();
    return cols;
  }

  /** Forget the records (the values are not kept alive by the arrays' room). */
  discard(): void {
    const n = this.count;
    this.count = 0;
    if (n > KEEP_ROOM) {
      this.values = [];
      this.timestamps = [];
      if (this.keyed) {
        this.keys = [];
        this.keyStrings = [];
        this.keyGroups = [];
      }
      return;
    }
    this.values.fill(undefined, 0, n);
    this.keys?.fill(undefined as unknown as Key, 0, n);
    this.keyStrings?.fill('', 0, n);
  }
}

/** A sealed buffer's columns: one class, so that the receivers' code sees one shape. */
class SealedColumns implements RecordColumns {
  constructor(
    readonly values: readonly unknown[],
    readonly timestamps: readonly number[],
    readonly maxTimestamp: number,
    readonly keys: readonly Key[] | undefined,
    readonly keyStrings: readonly string[] | undefined,
    readonly keyGroups: readonly number[] | undefined,
  ) {}
}
