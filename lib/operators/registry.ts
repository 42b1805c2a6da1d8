/** Builds the operator instance for a logical node. */
import { InvariantError } from '../errors.ts';
import type { OperatorContext, StreamOperator } from './contract.ts';
import { intervalJoinOperator } from './interval-join.ts';
import { coProcessOperator, keyedProcessOperator } from './keyed-process.ts';
import { filterOperator, flatMapOperator, mapOperator, passThroughOperator } from './stateless.ts';
import { windowJoinOperator } from './window-join.ts';
import { windowOperator } from './window.ts';

export function createOperator(ctx: OperatorContext): StreamOperator {
  const spec = ctx.node.spec;
  switch (spec.kind) {
    case 'source':
    case 'union':
    case 'sink':
      return passThroughOperator(ctx);
    case 'map':
      return mapOperator(ctx, spec.fn);
    case 'filter':
      return filterOperator(ctx, spec.fn);
    case 'flatMap':
      return flatMapOperator(ctx, spec.fn);
    case 'keyedProcess':
      return keyedProcessOperator(ctx, spec.fn);
    case 'coProcess':
      return coProcessOperator(ctx, spec.fn);
    case 'window':
      return windowOperator(ctx, spec);
    case 'windowJoin':
      return windowJoinOperator(ctx, spec);
    case 'intervalJoin':
      return intervalJoinOperator(ctx, spec);
    default:
      throw new InvariantError(`no operator for node kind ${(spec as { kind: string }).kind}`);
  }
}
