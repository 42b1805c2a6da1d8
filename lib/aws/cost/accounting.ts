/**
 * Request and capacity accounting for the AWS adapters, per service and operation.
 * The cost model multiplies these counters by the price table, so they count what a
 * run actually sent. Capacity is kept twice: as the service reported it
 * (ReturnConsumedCapacity) and as estimated from item sizes by AWS's published rules,
 * because DynamoDB Local under-reports transactional writes (about 4 units for a
 * 100-item transaction that AWS bills at 200).
 */

export interface OperationCounters {
  /** Requests sent (including those that failed). */
  requests: number;
  errors: number;
  /** Items read or written by these requests. */
  items: number;
  /** Capacity units the service reported. */
  readUnits: number;
  writeUnits: number;
  /** Capacity units by AWS's rules from item sizes (1 KB per write unit, 4 KB per strongly consistent read unit, x2 in transactions). */
  estimatedReadUnits: number;
  estimatedWriteUnits: number;
  /** Bytes sent or received as payload (SQS chunks, S3 objects). */
  bytes: number;
}

export interface OperationRow extends OperationCounters {
  readonly service: string;
  readonly operation: string;
}

function zero(): OperationCounters {
  return { requests: 0, errors: 0, items: 0, readUnits: 0, writeUnits: 0, estimatedReadUnits: 0, estimatedWriteUnits: 0, bytes: 0 };
}

export class AwsAccounting {
  private readonly counters = new Map<string, OperationRow>();

  /** Add to the counters of one operation. */
  record(service: string, operation: string, delta: Partial<OperationCounters>): void {
    const id = `${service}\u0000${operation}`;
    let row = this.counters.get(id);
    if (!row) this.counters.set(id, (row = { service, operation, ...zero() }));
    const r = row as OperationCounters;
    for (const k of Object.keys(delta) as (keyof OperationCounters)[]) r[k] += delta[k] ?? 0;
  }

  get(service: string, operation: string): OperationCounters {
    const row = this.counters.get(`${service}\u0000${operation}`);
    return row ? pick(row) : zero();
  }

  /** Sum over all operations of one service (or of all services). */
  totals(service?: string): OperationCounters {
    const out = zero();
    for (const row of this.counters.values()) {
      if (service !== undefined && row.service !== service) continue;
      for (const k of Object.keys(out) as (keyof OperationCounters)[]) out[k] += row[k];
    }
    return out;
  }

  rows(): OperationRow[] {
    return [...this.counters.values()].map((r) => ({ service: r.service, operation: r.operation, ...pick(r) }));
  }

  reset(): void {
    this.counters.clear();
  }
}

function pick(r: OperationCounters): OperationCounters {
  return {
    requests: r.requests,
    errors: r.errors,
    items: r.items,
    readUnits: r.readUnits,
    writeUnits: r.writeUnits,
    estimatedReadUnits: r.estimatedReadUnits,
    estimatedWriteUnits: r.estimatedWriteUnits,
    bytes: r.bytes,
  };
}

/** DynamoDB's ConsumedCapacity (one object, or one per table for transactions and batches) as read/write units. */
export function dynamoDbCapacity(consumed: unknown, totalIs: 'read' | 'write'): { readUnits: number; writeUnits: number } {
  const list = (Array.isArray(consumed) ? consumed : consumed ? [consumed] : []) as {
    CapacityUnits?: number;
    ReadCapacityUnits?: number;
    WriteCapacityUnits?: number;
  }[];
  let readUnits = 0;
  let writeUnits = 0;
  for (const c of list) {
    if (c.ReadCapacityUnits === undefined && c.WriteCapacityUnits === undefined) {
      // Only the total is reported (GetItem, Query with TOTAL): it is of the operation's own kind.
      if (totalIs === 'read') readUnits += c.CapacityUnits ?? 0;
      else writeUnits += c.CapacityUnits ?? 0;
      continue;
    }
    readUnits += c.ReadCapacityUnits ?? 0;
    writeUnits += c.WriteCapacityUnits ?? 0;
  }
  return { readUnits, writeUnits };
}
