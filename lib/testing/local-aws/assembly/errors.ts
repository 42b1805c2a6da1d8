/**
 * Errors of the assembly runner (`--target assembly`): each carries the data a caller
 * acts on (which function, action, resource; which template path), as SluiceErrors.
 */
import { SluiceError } from '../../../errors.ts';

/** The cloud assembly or its template cannot be read or uses something the runner does not resolve. */
export class AssemblyTemplateError extends SluiceError {
  readonly code = 'ASSEMBLY_TEMPLATE';
  readonly retryable = false;
  constructor(
    /** Where: a file, or `Resources.<logical id>.<property path>`. */
    readonly where: string,
    readonly problem: string,
  ) {
    super(`${where}: ${problem}`);
  }
}

/** One AWS call a function's role does not allow. */
export interface DeniedCall {
  /** The calling function's logical id (or `(unknown caller <access key>)`). */
  readonly function: string;
  /** IAM action, e.g. `dynamodb:PutItem`. */
  readonly action: string;
  /** Resource ARN the action was evaluated on. */
  readonly resource: string;
  /** Why: no statement allows it, or which statement denies it. */
  readonly reason: string;
  /** The API operation that carried the action, e.g. `TransactWriteItems`. */
  readonly operation: string;
}

/** A function called AWS with an action its role's policies do not allow: the run fails. */
export class AssemblyAccessDeniedError extends SluiceError {
  readonly code = 'ASSEMBLY_ACCESS_DENIED';
  readonly retryable = false;
  constructor(
    readonly denied: DeniedCall,
    /** Every denial recorded by the time the run stopped (the first is `denied`). */
    readonly all: readonly DeniedCall[] = [denied],
  ) {
    super(`function ${denied.function} called ${denied.action} on ${denied.resource}: denied by its role's policies (${denied.reason})${all.length > 1 ? `; ${all.length - 1} more denied call(s)` : ''}`);
  }
}

/** A function's bundle failed outside a handled invocation (it does not load, its container died). */
export class AssemblyFunctionError extends SluiceError {
  readonly code = 'ASSEMBLY_FUNCTION';
  readonly retryable = false;
  constructor(
    readonly functionId: string,
    readonly problem: string,
    options?: { cause?: unknown },
  ) {
    super(`function ${functionId}: ${problem}`, options);
  }
}

/** The run made no progress, or a step of it did not finish in time. */
export class AssemblyRunTimeoutError extends SluiceError {
  readonly code = 'ASSEMBLY_TIMEOUT';
  readonly retryable = true;
  constructor(
    readonly phase: string,
    readonly waitedMs: number,
    readonly detail: string,
  ) {
    super(`${phase}: nothing changed for ${Math.round(waitedMs / 1000)} s (${detail})`);
  }
}
