/**
 * The key group directories of the DynamoDB state backend (dynamodb-state.ts): per key
 * group (stage prefix + kg), the entity keys that have field items, read once with one
 * Query of sort keys and kept current by this process's own writes. A key not in it has
 * no items, so prefetch needs no Query for it (a window creates keys all the time). A key
 * group too large to list is not listed: Query per entity. Same validity as the backend's
 * read cache: dropped by recover() and on failed writes.
 */
import type { PartitionScope, StateWrite } from '../../state/backend.ts';
import * as L from './dynamodb-layout.ts';
import type { DynamoDbTable } from './dynamodb-table.ts';

/** Above this many items a key group is not listed (one Query page holds up to 1 MB anyway). */
const MAX_DIRECTORY_ITEMS = 10_000;

export class KeyGroupDirectories {
  /** `keys` undefined: the key group is too large to list. */
  private readonly byKeyGroup = new Map<string, { partition: number; keys?: Set<string> }>();

  constructor(private readonly db: DynamoDbTable) {}

  /** Load the key group's directory if not known yet. */
  async load(scope: PartitionScope, kg: number): Promise<void> {
    const id = directoryKey(scope, kg);
    if (this.byKeyGroup.has(id)) return;
    const page = await this.db.queryFirstPage('#pk = :pk', { ':pk': L.statePk(scope, kg) }, 'sk');
    const keys = page.complete && page.items.length <= MAX_DIRECTORY_ITEMS ? new Set(page.items.map((it) => L.entityKeyOfSk(String(it.sk)))) : undefined;
    this.byKeyGroup.set(id, { partition: scope.partition, keys });
  }

  /** False when the key group is listed and the entity is not: it has no field items to query. */
  mayHaveItems(scope: PartitionScope, kg: number, entity: string): boolean {
    const listed = this.byKeyGroup.get(directoryKey(scope, kg))?.keys;
    return !listed || listed.has(L.entityKey(entity).key);
  }

  /** After field items were (or may have been) written: list their entities, or forget the key group when unsure. */
  listed(scope: PartitionScope, writes: readonly StateWrite[], landed: boolean): void {
    for (const w of writes) {
      const dir = this.byKeyGroup.get(directoryKey(scope, w.kg));
      if (!dir?.keys) continue;
      if (!landed) this.byKeyGroup.delete(directoryKey(scope, w.kg));
      else if (w.value !== undefined) dir.keys.add(L.entityKey(w.entity).key);
      // A delete keeps the entity listed: it may have other fields; listing too much only costs a Query.
    }
  }

  /** Forget the key groups the partition loaded; other partitions of the stage keep theirs. */
  forget(scope: PartitionScope): void {
    const prefix = stagePrefix(scope);
    for (const [key, dir] of [...this.byKeyGroup]) if (dir.partition === scope.partition && key.startsWith(prefix)) this.byKeyGroup.delete(key);
  }
}

function directoryKey(scope: PartitionScope, kg: number): string {
  return `${stagePrefix(scope)}${kg}`;
}

/** The stage's prefix in keys of per-stage maps (these directories, the backend's read cache). */
export function stagePrefix(scope: PartitionScope): string {
  return `${scope.job.length}:${scope.job}/${scope.stage}/`;
}
