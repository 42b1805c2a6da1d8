/**
 * Lambda containers for one function of the assembly: each container is a worker thread
 * with the function's own environment (process.env is per worker) that imports the
 * bundle's handler module once and then serves one invocation at a time, as a warm
 * Lambda container does. Containers start on demand, up to `maxContainers`; a request
 * beyond that waits for a free one. An invocation past the function's timeout kills its
 * container (the next invocation starts a cold one), as does a crash of the worker.
 *
 * Results and errors cross as JSON (a thrown error becomes {errorType, errorMessage},
 * the caller gets an Error named errorType). The worker's stdout and stderr are passed on
 * line by line; classifyLine() tells Powertools log lines and EMF metric lines from others.
 */
import { randomUUID } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import type { Context } from 'aws-lambda';
import { AssemblyFunctionError } from './errors.ts';
import type { AssemblyFunction } from './model.ts';

/** Runs inside the worker (CommonJS, eval'd): load the handler, serve invocations, flush stdout before answering. */
const CONTAINER_SOURCE = String.raw`
const { parentPort, workerData } = require('node:worker_threads');
const { pathToFileURL } = require('node:url');
const { existsSync } = require('node:fs');
const path = require('node:path');
let loading;
function load() {
  loading ??= (async () => {
    const base = path.join(workerData.dir, workerData.module);
    const file = ['.mjs', '.js', '.cjs'].map((e) => base + e).find((f) => existsSync(f));
    if (!file) throw Object.assign(new Error('Cannot find module ' + workerData.module + ' in ' + workerData.dir), { name: 'Runtime.ImportModuleError' });
    const mod = await import(pathToFileURL(file).href);
    const h = mod[workerData.export] ?? (mod.default && mod.default[workerData.export]);
    if (typeof h !== 'function') throw Object.assign(new Error(path.basename(file) + '.' + workerData.export + ' is undefined or not exported'), { name: 'Runtime.HandlerNotFound' });
    return h;
  })();
  return loading;
}
const flush = (s) => new Promise((r) => s.write('', () => r()));
parentPort.on('message', async (m) => {
  if (m.type === 'exit') {
    await flush(process.stdout);
    await flush(process.stderr);
    process.exit(0);
  }
  if (m.type !== 'invoke') return;
  let reply;
  try {
    const handler = await load();
    const legacy = () => { throw new Error('context.done/fail/succeed are not supported: return a Promise'); };
    const context = { ...m.context, getRemainingTimeInMillis: () => Math.max(0, m.deadline - Date.now()), done: legacy, fail: legacy, succeed: legacy };
    const result = await handler(m.event, context);
    const text = JSON.stringify(result === undefined ? null : result);
    reply = { id: m.id, ok: true, result: text === undefined ? null : JSON.parse(text) };
  } catch (e) {
    const err = e instanceof Error ? e : new Error(String(e));
    reply = { id: m.id, ok: false, errorType: err.name || 'Error', errorMessage: err.message, stack: String(err.stack || '') };
  }
  await flush(process.stdout);
  parentPort.postMessage(reply);
});
`;

export type LineKind = 'log' | 'metric' | 'record' | 'text';

/** A Powertools logger line, an EMF metric line, another JSON line (a stdout sink's record), or plain text. */
export function classifyLine(line: string): LineKind {
  const t = line.trim();
  if (!t.startsWith('{') && !t.startsWith('[') && !t.startsWith('"') && !/^-?\d/.test(t) && t !== 'null' && t !== 'true' && t !== 'false') return 'text';
  let v: unknown;
  try {
    v = JSON.parse(t);
  } catch {
    return 'text';
  }
  if (v && typeof v === 'object' && !Array.isArray(v)) {
    const o = v as Record<string, unknown>;
    if (o._aws && typeof o._aws === 'object' && 'CloudWatchMetrics' in (o._aws as object)) return 'metric';
    if (typeof o.level === 'string' && 'message' in o && ('timestamp' in o || 'service' in o)) return 'log';
  }
  return 'record';
}

export interface FunctionHostOptions {
  readonly fn: AssemblyFunction;
  /** The container's whole environment. */
  readonly env: Readonly<Record<string, string>>;
  readonly maxContainers: number;
  /** Each line the function writes to stdout, with the container's number. */
  readonly onStdout?: (line: string, container: number) => void;
  readonly onStderr?: (line: string, container: number) => void;
  /** A container died outside an invocation, or its bundle does not load. */
  readonly onCrash?: (error: AssemblyFunctionError) => void;
}

export interface InvokeOptions {
  /** Epoch ms; default now + the function's timeout. */
  readonly deadline?: number;
  readonly requestId?: string;
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

class Container {
  readonly worker: Worker;
  pending?: Pending;
  readonly exited: Promise<void>;
  private readonly streamsEnded: Promise<void>[] = [];
  dead = false;

  constructor(
    readonly n: number,
    private readonly host: FunctionHost,
    o: FunctionHostOptions,
  ) {
    const fn = o.fn;
    this.worker = new Worker(CONTAINER_SOURCE, {
      eval: true,
      env: { ...o.env },
      workerData: { dir: fn.assetDir, module: fn.handlerModule, export: fn.handlerExport },
      stdout: true,
      stderr: true,
      resourceLimits: { maxOldGenerationSizeMb: Math.max(128, fn.memoryMb) },
    });
    this.streamsEnded.push(lines(this.worker.stdout, (l) => o.onStdout?.(l, n)), lines(this.worker.stderr, (l) => o.onStderr?.(l, n)));
    this.worker.on('message', (m: { id: string; ok: boolean; result?: unknown; errorType?: string; errorMessage?: string; stack?: string }) => {
      const p = this.pending;
      if (!p) return;
      this.pending = undefined;
      clearTimeout(p.timer);
      if (m.ok) p.resolve(m.result);
      else p.reject(Object.assign(new Error(m.errorMessage ?? 'error'), { name: m.errorType ?? 'Error', stack: m.stack }));
      this.host.release(this);
    });
    this.exited = new Promise<void>((resolve) => {
      this.worker.once('error', (e) => this.die(`its worker crashed: ${e.message}`, e));
      this.worker.once('exit', (code) => {
        this.die(`its worker exited with code ${code}`);
        resolve();
      });
    });
  }

  invoke(event: unknown, context: Record<string, unknown>, deadline: number, timeoutSeconds: number): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        if (this.pending?.timer !== timer) return;
        this.pending = undefined;
        reject(Object.assign(new Error(`Task timed out after ${timeoutSeconds.toFixed(2)} seconds`), { name: 'Sandbox.Timedout' }));
        // Lambda discards a container whose invocation timed out.
        this.dead = true;
        void this.worker.terminate();
        this.host.release(this);
      }, Math.max(0, deadline - Date.now()));
      this.pending = { resolve, reject, timer };
      this.worker.postMessage({ type: 'invoke', id: context.awsRequestId, event, context, deadline });
    });
  }

  private die(why: string, cause?: unknown): void {
    if (this.dead && !this.pending) return;
    this.dead = true;
    const p = this.pending;
    this.pending = undefined;
    if (p) {
      clearTimeout(p.timer);
      p.reject(Object.assign(new Error(`Runtime exited: ${why}`), { name: 'Runtime.ExitError' }));
    } else if (!this.host.stopping) this.host.crashed(new AssemblyFunctionError(this.host.fn.logicalId, `a container died between invocations: ${why}`, { cause }));
    this.host.release(this);
  }

  /** Flush its output and end it (waits for a running invocation first). */
  async close(graceMs: number): Promise<void> {
    if (!this.dead) {
      this.worker.postMessage({ type: 'exit' });
      const t = setTimeout(() => void this.worker.terminate(), graceMs);
      await this.exited;
      clearTimeout(t);
    }
    await Promise.all(this.streamsEnded);
  }
}

export class FunctionHost {
  readonly metrics = { invocations: 0, coldStarts: 0, errors: 0, timeouts: 0 };
  stopping = false;
  private readonly containers: Container[] = [];
  private readonly idle: Container[] = [];
  private readonly waiting: ((c: Container) => void)[] = [];
  private readonly closed: Promise<void>[] = [];
  private next = 0;

  constructor(private readonly options: FunctionHostOptions) {
    if (!options.fn.assetDir) throw new AssemblyFunctionError(options.fn.logicalId, 'it has no bundle directory in the assembly (inline code or a container image cannot run locally)');
  }

  get fn(): AssemblyFunction {
    return this.options.fn;
  }

  /** Invocations running now. */
  get busy(): number {
    return this.containers.filter((c) => c.pending).length + this.waiting.length;
  }

  /** One invocation: the handler's result, or a rejection with its error. */
  async invoke(event: unknown, o: InvokeOptions = {}): Promise<unknown> {
    if (this.stopping) throw new AssemblyFunctionError(this.fn.logicalId, 'invoked while the run is stopping');
    const fn = this.fn;
    const deadline = o.deadline ?? Date.now() + fn.timeoutSeconds * 1000;
    const requestId = o.requestId ?? randomUUID();
    const container = await this.acquire();
    this.metrics.invocations++;
    const day = new Date().toISOString().slice(0, 10).replace(/-/g, '/');
    const context: Partial<Context> = {
      callbackWaitsForEmptyEventLoop: true,
      functionName: fn.name,
      functionVersion: '$LATEST',
      invokedFunctionArn: fn.arn,
      memoryLimitInMB: String(fn.memoryMb),
      awsRequestId: requestId,
      logGroupName: fn.logGroupName,
      logStreamName: `${day}/[$LATEST]${container.n.toString(16).padStart(32, '0')}`,
    };
    try {
      return await container.invoke(event, context, deadline, fn.timeoutSeconds);
    } catch (e) {
      this.metrics.errors++;
      if ((e as Error).name === 'Sandbox.Timedout') this.metrics.timeouts++;
      throw e;
    }
  }

  private acquire(): Promise<Container> {
    const free = this.idle.pop();
    if (free) return Promise.resolve(free);
    const live = this.containers.filter((c) => !c.dead);
    if (live.length < this.options.maxContainers) {
      const c = new Container(this.next++, this, this.options);
      this.containers.push(c);
      this.metrics.coldStarts++;
      return Promise.resolve(c);
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** A container finished an invocation (or died): hand it, or a new one, to the next waiter. */
  release(c: Container): void {
    if (c.dead) {
      const i = this.containers.indexOf(c);
      if (i >= 0) this.containers.splice(i, 1);
      const j = this.idle.indexOf(c);
      if (j >= 0) this.idle.splice(j, 1);
      this.closed.push(c.close(0));
      const w = this.waiting.shift();
      if (w) {
        const fresh = new Container(this.next++, this, this.options);
        this.containers.push(fresh);
        this.metrics.coldStarts++;
        w(fresh);
      }
      return;
    }
    if (c.pending) return;
    const w = this.waiting.shift();
    if (w) w(c);
    else if (!this.idle.includes(c)) this.idle.push(c);
  }

  crashed(e: AssemblyFunctionError): void {
    this.options.onCrash?.(e);
  }

  /** Wait for running invocations (up to graceMs), flush every container's output and end them. */
  async stop(graceMs = 10_000): Promise<void> {
    this.stopping = true;
    const deadline = Date.now() + graceMs;
    while (this.containers.some((c) => c.pending) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await Promise.all(this.containers.map((c) => c.close(Math.max(500, deadline - Date.now()))));
    await Promise.all(this.closed);
  }
}

/** Split a stream into lines; resolves when it ends. */
function lines(stream: NodeJS.ReadableStream, onLine: (line: string) => void): Promise<void> {
  let rest = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    rest += chunk;
    let i = rest.indexOf('\n');
    while (i >= 0) {
      onLine(rest.slice(0, i).replace(/\r$/, ''));
      rest = rest.slice(i + 1);
      i = rest.indexOf('\n');
    }
  });
  return new Promise<void>((resolve) => {
    const done = () => {
      if (rest) onLine(rest);
      rest = '';
      resolve();
    };
    stream.once('end', done);
    stream.once('close', done);
  });
}
