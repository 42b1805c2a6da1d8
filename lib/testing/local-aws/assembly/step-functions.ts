/**
 * A minimal Step Functions service for the assembly's state machines, behind the proxy
 * (X-Amz-Target AWSStepFunctions.*): StartExecution, DescribeExecution, ListExecutions,
 * StopExecution, DescribeStateMachine. Each execution runs the template's definition with
 * aws-local-stepfunctions; its Task states call the functions of the template in their
 * containers (a function ARN, or `arn:aws:states:::lambda:invoke`) and start executions
 * (`arn:aws:states:::states:startExecution`), each checked against the state machine's
 * role as Step Functions would. Wait states are shortened for local runs (waitMs).
 */
import { randomUUID } from 'node:crypto';
import { StateMachine } from 'aws-local-stepfunctions';
import type { Decision } from './authorizer.ts';
import type { ActionRequest } from './iam-requests.ts';
import type { AssemblyModel, AssemblyStateMachine } from './model.ts';
import type { StepFunctionsEndpoint } from './proxy.ts';

// aws-local-stepfunctions 3 uses Promise.withResolvers (Node 22); Node 20 lacks it.
(Promise as unknown as { withResolvers?: unknown }).withResolvers ??= function <T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((a, b) => ((resolve = a), (reject = b)));
  return { promise, resolve, reject };
};

export type ExecutionStatus = 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'TIMED_OUT' | 'ABORTED';

export interface LocalExecution {
  readonly executionArn: string;
  readonly stateMachineArn: string;
  readonly name: string;
  readonly input: string;
  readonly startDate: number;
  status: ExecutionStatus;
  stopDate?: number;
  output?: string;
  error?: string;
  cause?: string;
  readonly done: Promise<void>;
  abort(): void;
}

export interface LocalStepFunctionsOptions {
  readonly model: AssemblyModel;
  /** Invoke a function of the template (by logical id) with a payload; resolves to its result, rejects with its error (name = errorType). */
  readonly invoke: (functionLogicalId: string, payload: unknown) => Promise<unknown>;
  /** The state machine role's decision on a task's call; a denial is recorded by the caller of this. */
  readonly authorize: (machine: AssemblyStateMachine, request: ActionRequest) => Promise<Decision>;
  /** How long a Wait state lasts locally (default: its seconds, at most 1 s). */
  readonly waitMs?: (state: string, seconds: number | undefined) => number;
  /** Retry intervals locally (default 200 ms). */
  readonly retryIntervalMs?: number;
  readonly log?: (line: string) => void;
}

class TaskError extends Error {
  constructor(name: string, message: string) {
    super(message);
    this.name = name;
  }
}

const seconds = (ms: number) => ms / 1000;

export class LocalStepFunctions implements StepFunctionsEndpoint {
  readonly executions = new Map<string, LocalExecution>();
  private readonly machines = new Map<string, AssemblyStateMachine>();
  private stopped = false;

  constructor(private readonly options: LocalStepFunctionsOptions) {
    for (const m of options.model.stateMachines.values()) this.machines.set(m.arn, m);
  }

  get running(): LocalExecution[] {
    return [...this.executions.values()].filter((e) => e.status === 'RUNNING');
  }

  async handle(operation: string, input: Record<string, any>): Promise<{ status: number; body: unknown }> {
    const error = (type: string, message: string) => ({ status: 400, body: { __type: type, message } });
    switch (operation) {
      case 'StartExecution': {
        const r = this.start(String(input.stateMachineArn), input.name === undefined ? undefined : String(input.name), input.input === undefined ? '{}' : String(input.input));
        if ('failure' in r) return error(r.failure, r.message);
        return { status: 200, body: { executionArn: r.executionArn, startDate: seconds(r.startDate) } };
      }
      case 'DescribeExecution': {
        const e = this.executions.get(String(input.executionArn));
        if (!e) return error('ExecutionDoesNotExist', `Execution Does Not Exist: '${input.executionArn}'`);
        return { status: 200, body: describe(e) };
      }
      case 'ListExecutions': {
        if (!this.machines.has(String(input.stateMachineArn))) return error('StateMachineDoesNotExist', `State Machine Does Not Exist: '${input.stateMachineArn}'`);
        const all = [...this.executions.values()].filter((e) => e.stateMachineArn === input.stateMachineArn && (!input.statusFilter || e.status === input.statusFilter));
        all.sort((a, b) => b.startDate - a.startDate);
        const from = input.nextToken ? Number(input.nextToken) : 0;
        const max = Number(input.maxResults) > 0 ? Number(input.maxResults) : 100;
        const page = all.slice(from, from + max);
        const body: Record<string, unknown> = { executions: page.map((e) => ({ executionArn: e.executionArn, stateMachineArn: e.stateMachineArn, name: e.name, status: e.status, startDate: seconds(e.startDate), ...(e.stopDate ? { stopDate: seconds(e.stopDate) } : {}) })) };
        if (from + max < all.length) body.nextToken = String(from + max);
        return { status: 200, body };
      }
      case 'StopExecution': {
        const e = this.executions.get(String(input.executionArn));
        if (!e) return error('ExecutionDoesNotExist', `Execution Does Not Exist: '${input.executionArn}'`);
        if (e.status === 'RUNNING') {
          e.error = input.error === undefined ? undefined : String(input.error);
          e.cause = input.cause === undefined ? undefined : String(input.cause);
          e.abort();
        }
        return { status: 200, body: { stopDate: seconds(e.stopDate ?? Date.now()) } };
      }
      case 'DescribeStateMachine': {
        const m = this.machines.get(String(input.stateMachineArn));
        if (!m) return error('StateMachineDoesNotExist', `State Machine Does Not Exist: '${input.stateMachineArn}'`);
        return { status: 200, body: { stateMachineArn: m.arn, name: m.name, status: 'ACTIVE', definition: JSON.stringify(m.definition), roleArn: m.roleArn, type: 'STANDARD', creationDate: 0 } };
      }
      default:
        return error('UnknownOperationException', `${operation} is not served by the local Step Functions`);
    }
  }

  /** Start an execution (StartExecution and the startExecution task). */
  start(stateMachineArn: string, name: string | undefined, input: string): LocalExecution | { failure: string; message: string } {
    const machine = this.machines.get(stateMachineArn);
    if (!machine) return { failure: 'StateMachineDoesNotExist', message: `State Machine Does Not Exist: '${stateMachineArn}'` };
    const execName = name ?? randomUUID();
    const executionArn = `${stateMachineArn.replace(':stateMachine:', ':execution:')}:${execName}`;
    const existing = this.executions.get(executionArn);
    if (existing) {
      if (existing.status === 'RUNNING' && existing.input === input) return existing;
      return { failure: 'ExecutionAlreadyExists', message: `Execution Already Exists: '${executionArn}'` };
    }
    if (this.stopped) return { failure: 'ServiceUnavailable', message: 'the local Step Functions is stopping' };
    let parsed: unknown;
    try {
      parsed = JSON.parse(input);
    } catch {
      return { failure: 'InvalidExecutionInput', message: 'the execution input is not JSON' };
    }
    const sm = new StateMachine(machine.definition as never, { validationOptions: { checkPaths: false, checkArn: false } });
    const startDate = Date.now();
    const run = sm.run(parsed as never, {
      noThrowOnAbort: true,
      overrides: this.overrides(machine),
      context: { Execution: { Id: executionArn, Name: execName, Input: parsed, StartTime: new Date(startDate).toISOString(), RoleArn: machine.roleArn }, StateMachine: { Id: stateMachineArn, Name: machine.name } } as never,
    });
    const execution: LocalExecution = {
      executionArn,
      stateMachineArn,
      name: execName,
      input,
      startDate,
      status: 'RUNNING',
      abort: () => {
        if (execution.status !== 'RUNNING') return;
        execution.status = 'ABORTED';
        execution.stopDate = Date.now();
        run.abort();
      },
      done: run.result.then(
        (out) => {
          if (execution.status !== 'RUNNING') return;
          execution.status = 'SUCCEEDED';
          execution.stopDate = Date.now();
          execution.output = JSON.stringify(out);
        },
        (e: Error & { cause?: unknown }) => {
          if (execution.status !== 'RUNNING') return;
          execution.status = e.name === 'ExecutionTimeoutError' ? 'TIMED_OUT' : 'FAILED';
          execution.stopDate = Date.now();
          execution.error = e.name;
          execution.cause = e.message;
          this.options.log?.(`state machine ${machine.logicalId}: execution ${execName} ${execution.status}: ${e.message}`);
        },
      ),
    };
    this.executions.set(executionArn, execution);
    return execution;
  }

  /** Abort every running execution and wait for them to settle. */
  async stop(): Promise<void> {
    this.stopped = true;
    const running = this.running;
    for (const e of running) e.abort();
    await Promise.allSettled([...this.executions.values()].map((e) => e.done));
  }

  private overrides(machine: AssemblyStateMachine) {
    const tasks: Record<string, (input: unknown) => Promise<never>> = {};
    const waits: Record<string, number> = {};
    const retries: Record<string, number> = {};
    const waitMs = this.options.waitMs ?? ((_s, secs) => Math.min((secs ?? 1) * 1000, 1000));
    const visit = (states: Record<string, Record<string, any>>) => {
      for (const [name, s] of Object.entries(states ?? {})) {
        if (s.Type === 'Task') tasks[name] = (input) => this.task(machine, name, String(s.Resource), input) as Promise<never>;
        if (s.Type === 'Wait') waits[name] = waitMs(name, typeof s.Seconds === 'number' ? s.Seconds : undefined);
        if (s.Retry) retries[name] = this.options.retryIntervalMs ?? 200;
        for (const b of s.Branches ?? []) visit(b.States);
        if (s.Iterator) visit(s.Iterator.States);
        if (s.ItemProcessor) visit(s.ItemProcessor.States);
      }
    };
    visit(machine.definition.States as Record<string, Record<string, any>>);
    return { taskResourceLocalHandlers: tasks as never, waitTimeOverrides: waits, retryIntervalOverrides: retries };
  }

  private async task(machine: AssemblyStateMachine, state: string, resource: string, input: unknown): Promise<unknown> {
    const check = async (action: string, arn: string) => {
      const d = await this.options.authorize(machine, { operation: `${state} task`, action, resource: arn, context: {} });
      if (!d.allowed) throw new TaskError('States.TaskFailed', `the state machine's role may not ${action} on ${arn}: ${d.reason}`);
    };
    if (/^arn:[^:]+:states:::lambda:invoke/.test(resource)) {
      const i = input as { FunctionName?: string; Payload?: unknown };
      const fn = this.functionOf(String(i.FunctionName));
      await check('lambda:InvokeFunction', fn.arn);
      const payload = await this.invoke(fn.logicalId, i.Payload);
      return { ExecutedVersion: '$LATEST', Payload: payload, StatusCode: 200 };
    }
    if (/^arn:[^:]+:states:::states:startExecution/.test(resource)) {
      const i = input as { StateMachineArn?: string; Name?: string; Input?: unknown };
      await check('states:StartExecution', String(i.StateMachineArn));
      const r = this.start(String(i.StateMachineArn), i.Name, typeof i.Input === 'string' ? i.Input : JSON.stringify(i.Input ?? {}));
      if ('failure' in r) throw new TaskError(`StepFunctions.${r.failure}Exception`, r.message);
      return { ExecutionArn: r.executionArn, StartDate: new Date(r.startDate).toISOString() };
    }
    if (/^arn:[^:]+:lambda:/.test(resource)) {
      const fn = this.functionOf(resource);
      await check('lambda:InvokeFunction', resource);
      return this.invoke(fn.logicalId, input);
    }
    throw new TaskError('States.TaskFailed', `task resource ${resource} is not run locally (only Lambda functions of the template and startExecution)`);
  }

  private functionOf(ref: string) {
    const fn = [...this.options.model.functions.values()].find((f) => ref === f.arn || ref === f.name || ref.startsWith(`${f.arn}:`));
    if (!fn) throw new TaskError('Lambda.ResourceNotFoundException', `function ${ref} is not in the template`);
    return fn;
  }

  private async invoke(logicalId: string, payload: unknown): Promise<unknown> {
    try {
      return await this.options.invoke(logicalId, payload);
    } catch (e) {
      const err = e as Error;
      throw new TaskError(err.name && err.name !== 'Error' ? err.name : 'Error', err.message);
    }
  }
}

function describe(e: LocalExecution) {
  return {
    executionArn: e.executionArn,
    stateMachineArn: e.stateMachineArn,
    name: e.name,
    status: e.status,
    startDate: seconds(e.startDate),
    ...(e.stopDate ? { stopDate: seconds(e.stopDate) } : {}),
    input: e.input,
    ...(e.output !== undefined ? { output: e.output } : {}),
    ...(e.error !== undefined ? { error: e.error } : {}),
    ...(e.cause !== undefined ? { cause: e.cause } : {}),
  };
}
