/** Operators without state: they transform records and pass event time through. */
import type { StreamRecord } from '../api/types.ts';
import type { OperatorContext, StreamOperator } from './contract.ts';

export function passThroughOperator(ctx: OperatorContext): StreamOperator {
  return { processElement: (r: StreamRecord) => ctx.emit(r.value, r.timestamp) };
}

export function mapOperator(ctx: OperatorContext, fn: (v: unknown) => unknown): StreamOperator {
  return { processElement: (r) => ctx.emit(fn(r.value), r.timestamp) };
}

export function filterOperator(ctx: OperatorContext, fn: (v: unknown) => boolean): StreamOperator {
  return {
    processElement: (r) => {
      if (fn(r.value)) ctx.emit(r.value, r.timestamp);
    },
  };
}

export function flatMapOperator(ctx: OperatorContext, fn: (v: unknown) => Iterable<unknown>): StreamOperator {
  return {
    processElement: (r) => {
      for (const out of fn(r.value)) ctx.emit(out, r.timestamp);
    },
  };
}
