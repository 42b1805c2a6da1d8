/** Runs the real `sluice` launcher (bin/sluice.js) as a child process. */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `env`: the child's environment (default this process's). */
export function sluice(args: readonly string[], options: { timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['bin/sluice.js', ...args], { cwd: ROOT, env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`sluice ${args.join(' ')} timed out after ${options.timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, options.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Resolves with the first match of `pattern` in what `read()` returns, polling; rejects with the output after timeoutMs. */
export function waitFor(read: () => string, pattern: RegExp, timeoutMs: number): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const poll = setInterval(() => {
      const m = read().match(pattern);
      if (m) {
        clearInterval(poll);
        resolve(m);
      } else if (Date.now() - started > timeoutMs) {
        clearInterval(poll);
        reject(new Error(`timed out waiting for ${pattern}; output so far:\n${read()}`));
      }
    }, 50);
  });
}

/** A `sluice` process that serves a job (`dev`, `restore` without --input): its output so far and its exit. */
export interface ServedJob {
  readonly child: ChildProcess;
  /** The ingestion endpoint it announced. */
  readonly url: string;
  stdout(): string;
  stderr(): string;
  readonly exited: Promise<number | null>;
}

/** Starts `sluice <args>` and resolves once it announces its ingestion endpoint (rejects with its output after timeoutMs). */
export async function serveJob(args: readonly string[], options: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<ServedJob> {
  const child = spawn(process.execPath, ['bin/sluice.js', ...args], { cwd: ROOT, env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
  const [, url] = await waitFor(() => err, /ingestion endpoint (http:\/\/127\.0\.0\.1:\d+)/, options.timeoutMs ?? 30_000);
  return { child, url, stdout: () => out, stderr: () => err, exited };
}
