/**
 * Local servers that speak the AWS APIs, started on loopback: DynamoDB Local (the
 * real Java emulator: transactions, conditions, TTL) and fauxqs (SQS and S3, in
 * process). The aws test project and `--target local-aws` both start them from here.
 *
 * The DynamoDB Local jar ships inside the npm package amplify-dynamodb-simulator;
 * installing that package pulls ~350 MB of dependencies, so we `npm pack` it once into
 * ~/.cache/sluice and extract only `emulator/` (56 MB).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DynamoDBClient, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { ConfigError } from '../../errors.ts';

const run = promisify(execFile);

/** Pinned: the emulator inside is DynamoDB Local 1.25.1. */
export const SIMULATOR_PACKAGE = 'amplify-dynamodb-simulator@2.9.30';
/** One download per machine, shared by every project (SLUICE_CACHE_DIR moves it). */
const CACHE = join(process.env.SLUICE_CACHE_DIR ?? join(homedir(), '.cache', 'sluice'), 'dynamodb-local', SIMULATOR_PACKAGE.replace(/[@/]/g, '_'));

/** Dummy credentials and region: DynamoDB Local checks only that they are present and alphanumeric. */
export const LOCAL_REGION = 'us-east-1';
export const LOCAL_CREDENTIALS = { accessKeyId: 'local', secretAccessKey: 'local' };

export interface LocalServer {
  readonly endpoint: string;
  stop(): Promise<void>;
}

/** The extracted emulator directory, fetched with `npm pack` on first use and reused after. */
export async function dynamoDbLocalDir(): Promise<string> {
  const dir = join(CACHE, 'emulator');
  if (existsSync(join(dir, 'DynamoDBLocal.jar'))) return dir;
  mkdirSync(CACHE, { recursive: true });
  // Work in a private directory and rename at the end, so concurrent runs never see half an emulator.
  const work = mkdtempSync(join(CACHE, 'tmp-'));
  try {
    await run('npm', ['pack', SIMULATOR_PACKAGE, '--pack-destination', work, '--silent'], { cwd: work, maxBuffer: 16 << 20 });
    const tgz = readdirSync(work).find((f) => f.endsWith('.tgz'));
    if (!tgz) throw new Error(`npm pack ${SIMULATOR_PACKAGE} produced no tarball in ${work}`);
    await run('tar', ['-xzf', join(work, tgz), '-C', work, 'package/emulator']);
    try {
      renameSync(join(work, 'package/emulator'), dir);
    } catch (e) {
      if (!existsSync(join(dir, 'DynamoDBLocal.jar'))) throw e; // another run won the race
    }
    return dir;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

async function javaVersion(): Promise<string> {
  try {
    const { stderr, stdout } = await run('java', ['-version']);
    return (stderr || stdout).split('\n')[0];
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new ConfigError('java', 'Java 17 on PATH for DynamoDB Local (`apt-get install -y openjdk-17-jre-headless`), or AWS_ENDPOINT_URL_DYNAMODB set to a running DynamoDB', 'no `java` command');
    }
    throw e;
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolvePort(port));
    });
  });
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

export async function startDynamoDbLocal(): Promise<LocalServer> {
  await javaVersion();
  const dir = await dynamoDbLocalDir();
  let lastError: unknown;
  // A port taken between freePort() and Java's bind makes Java exit: try another.
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return await launch(dir, await freePort());
    } catch (e) {
      lastError = e;
    }
  }
  throw lastError;
}

async function launch(dir: string, port: number): Promise<LocalServer> {
  // C1 only and the serial collector: the JVM answers in about half the time, and the tests barely warm it up.
  const args = ['-XX:TieredStopAtLevel=1', '-XX:+UseSerialGC', `-Djava.library.path=${join(dir, 'DynamoDBLocal_lib')}`, '-jar', join(dir, 'DynamoDBLocal.jar'), '-inMemory', '-sharedDb', '-disableTelemetry', '-port', String(port)];
  // detached: its own process group, so stop() ends Java and anything it started.
  const child = spawn('java', args, { cwd: tmpdir(), detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const keep = (b: Buffer) => (output = (output + b.toString()).slice(-4000));
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  let exited: { code: number | null } | undefined;
  const exitPromise = new Promise<void>((r) => child.once('exit', (code) => ((exited = { code }), r())));
  // If this process dies without stop(), do not leave Java behind.
  const onExit = () => killGroup(child, 'SIGKILL');
  process.once('exit', onExit);

  const endpoint = `http://127.0.0.1:${port}`;
  const stop = async () => {
    process.removeListener('exit', onExit);
    if (exited) return;
    killGroup(child, 'SIGTERM');
    const timer = setTimeout(() => killGroup(child, 'SIGKILL'), 5000);
    await exitPromise;
    clearTimeout(timer);
  };

  const client = new DynamoDBClient({ endpoint, region: LOCAL_REGION, credentials: LOCAL_CREDENTIALS, maxAttempts: 1 });
  const deadline = Date.now() + 60_000;
  try {
    for (;;) {
      if (exited) throw new Error(`DynamoDB Local exited with code ${exited.code} before answering on ${endpoint}:\n${output}`);
      try {
        await client.send(new ListTablesCommand({}), { abortSignal: AbortSignal.timeout(2000) });
        return { endpoint, stop };
      } catch {
        if (Date.now() > deadline) throw new Error(`DynamoDB Local did not answer ListTables on ${endpoint} within 60 s:\n${output}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  } catch (e) {
    await stop();
    throw e;
  } finally {
    client.destroy();
  }
}

/**
 * fauxqs (SQS, SNS and S3 emulator) in this process on a free loopback port.
 * startFauxqs() from the package listens on 0.0.0.0; building the app ourselves keeps
 * it on 127.0.0.1. Its queue URLs name `sqs.<region>.localhost:<port>`, which does not
 * resolve here: an SQS client must either get `endpoint` in its config (then the SDK
 * ignores the URL's host) or `useQueueUrlAsEndpoint: false` (needed when the endpoint
 * comes from AWS_ENDPOINT_URL_SQS). S3 needs `forcePathStyle: true`. Imported lazily:
 * needed only when no SQS/S3 endpoint is configured.
 */
export async function startFauxqs(): Promise<LocalServer> {
  let buildApp: typeof import('fauxqs').buildApp;
  try {
    ({ buildApp } = await import('fauxqs'));
  } catch (e) {
    throw new ConfigError('fauxqs', 'the fauxqs package (a dependency of sluice) or AWS_ENDPOINT_URL_SQS and AWS_ENDPOINT_URL_S3 set to running servers', `an import error: ${(e as Error).message}`);
  }
  const app = buildApp({ logger: false });
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  const endpoint = new URL(address).origin;
  return {
    endpoint,
    stop: async () => {
      await app.close();
    },
  };
}
