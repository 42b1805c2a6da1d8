/**
 * Where snapshots, manifests and logged input go (checkpoint storage), kept apart
 * from where working state lives (lib/state). Two primitives, each with a local
 * implementation (a directory, an atomically renamed file) and an AWS one (S3 for
 * blobs, DynamoDB conditional writes for pointers: no S3 emulator honours
 * conditional puts, so commit points never rely on them).
 */

export interface BlobStore {
  /**
   * Store an immutable object. Writing the same key again with the same bytes is a
   * no-op (so a retried step is safe); with different bytes it is an error: objects
   * are never overwritten.
   */
  put(key: string, body: Uint8Array): Promise<void>;
  /** The object's bytes, or undefined when absent. */
  get(key: string): Promise<Uint8Array | undefined>;
  /** Keys under a prefix, in lexical order. */
  list(prefix: string): Promise<string[]>;
  /** Remove objects (truncation, discarded snapshots); absent keys are ignored. */
  delete(keys: readonly string[]): Promise<void>;
}

export interface PointerValue<T> {
  readonly value: T;
  /** Increments by one on every successful write; 0 means never written. */
  readonly version: number;
}

/** Small named values changed only by compare-and-set: checkpoint pointers, coordinator records. */
export interface PointerStore {
  read<T>(name: string): Promise<PointerValue<T> | undefined>;
  /** Write when the stored version equals expectedVersion (0: absent). False when another writer won. */
  compareAndSet<T>(name: string, expectedVersion: number, value: T): Promise<boolean>;
}
