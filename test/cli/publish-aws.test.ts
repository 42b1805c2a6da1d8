/**
 * `sluice publish` to deployed endpoints: SigV4 signing (checked by re-signing what the
 * server received), retries of 429 and 5xx with the batch's Idempotency-Key, 403 advice,
 * and the signer staying unloaded for unsigned requests.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Hash } from '@smithy/core/serde';
import { SignatureV4 } from '@smithy/signature-v4';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { awsEndpointOf, parseRetryAfter, PublishRefusedError, publishFile, signingScopeFor } from '../../lib/cli/publish.ts';
import { publishCommand } from '../../lib/cli/publish-command.ts';
import { NodeSha256 } from '../../lib/cli/sigv4.ts';
import { BackPressureError, ConfigError } from '../../lib/errors.ts';
import { ROOT } from './helpers.ts';

const CREDS = { accessKeyId: 'AKIDPUBLISHTEST', secretAccessKey: 'publish/test/secret+key', sessionToken: 'session-token-for-tests' };

interface Received {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

interface Answer {
  status: number;
  headers?: Record<string, string>;
  body: unknown;
}

/**
 * Re-signs the request as received with @smithy/signature-v4 (its own hash, not the
 * client's) and the credentials, at the request's x-amz-date, over the headers it names
 * as signed; the payload hash is recomputed from the received body.
 */
async function verifySignature(req: Received, creds = CREDS): Promise<{ ok: boolean; scope: string[]; signedHeaders: string[] }> {
  const auth = String(req.headers.authorization ?? '');
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=[0-9a-f]{64}$/.exec(auth);
  if (!m) return { ok: false, scope: [], signedHeaders: [] };
  const signedHeaders = m[5]!.split(';');
  const headers: Record<string, string> = {};
  for (const h of signedHeaders) {
    // Recomputed by the signer: from the body, the date and the credentials.
    if (h === 'x-amz-content-sha256' || h === 'x-amz-date' || h === 'x-amz-security-token') continue;
    headers[h] = String(req.headers[h]);
  }
  const amzDate = String(req.headers['x-amz-date']);
  const signingDate = new Date(amzDate.replace(/^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z$/, '$1-$2-$3T$4:$5:$6Z'));
  const url = new URL(req.url, `http://${req.headers.host}`);
  const signer = new SignatureV4({ credentials: creds, region: m[3]!, service: m[4]!, sha256: Hash.bind(null, 'sha256') });
  const resigned = await signer.sign(
    { method: req.method, protocol: 'http:', hostname: url.hostname, port: Number(url.port), path: url.pathname, query: {}, headers, body: req.body },
    { signingDate },
  );
  const ok =
    resigned.headers.authorization === auth &&
    req.headers['x-amz-content-sha256'] === createHash('sha256').update(req.body).digest('hex') &&
    signedHeaders.every((h) => resigned.headers[h] !== undefined);
  return { ok, scope: m.slice(1, 5), signedHeaders };
}

/** A loopback endpoint: `answer` decides each reply; events of accepted requests are kept once per Idempotency-Key, as the AWS ingest function deduplicates. */
class Endpoint {
  received: Received[] = [];
  enqueued: unknown[] = [];
  keysEnqueued = new Set<string>();
  answer: (req: Received, n: number) => Answer = () => ({ status: 202, body: {} });
  private server: Server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (d: string) => (body += d));
    req.on('end', () => {
      const r: Received = { method: req.method!, url: req.url!, headers: req.headers, body };
      this.received.push(r);
      const a = this.answer(r, this.received.length);
      res.writeHead(a.status, { 'content-type': 'application/json', ...a.headers }).end(typeof a.body === 'string' ? a.body : JSON.stringify(a.body));
    });
  });
  url = '';

  /** A 202 for every event of the request, enqueued unless its key was enqueued before. */
  accept(r: Received): Answer {
    const events = r.body.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as unknown);
    const key = String(r.headers['idempotency-key']);
    if (!this.keysEnqueued.has(key)) {
      this.keysEnqueued.add(key);
      this.enqueued.push(...events);
    }
    return { status: 202, body: { accepted: events.length, rejected: [] } };
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
  reset(): void {
    this.received = [];
    this.enqueued = [];
    this.keysEnqueued.clear();
    this.answer = (r) => this.accept(r);
  }
}

const endpoint = new Endpoint();
let dir: string;
const savedEnv: Record<string, string | undefined> = {};
const ENV = { AWS_ACCESS_KEY_ID: CREDS.accessKeyId, AWS_SECRET_ACCESS_KEY: CREDS.secretAccessKey, AWS_SESSION_TOKEN: CREDS.sessionToken, AWS_PROFILE: undefined };

beforeAll(async () => {
  await endpoint.start();
  dir = await mkdtemp(join(tmpdir(), 'sluice-publish-aws-'));
  for (const [k, v] of Object.entries(ENV)) {
    savedEnv[k] = process.env[k];
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
});
afterAll(async () => {
  await endpoint.close();
  await rm(dir, { recursive: true, force: true });
  for (const [k, v] of Object.entries(savedEnv)) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
});
beforeEach(() => endpoint.reset());
afterEach(() => endpoint.reset());

let fileCount = 0;
async function jsonl(events: unknown[]): Promise<string> {
  const file = join(dir, `events-${fileCount++}.jsonl`);
  await writeFile(file, events.map((e) => JSON.stringify(e)).join('\n') + '\n');
  return file;
}
const ids = (n: number) => Array.from({ length: n }, (_, i) => ({ id: i }));
const keys = () => endpoint.received.map((r) => r.headers['idempotency-key']);

describe('which requests are signed', () => {
  it('derives service and region from HTTP API and Function URL hosts only', () => {
    expect(awsEndpointOf('https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/')).toEqual({ service: 'execute-api', region: 'eu-west-1' });
    expect(awsEndpointOf('https://abc123.execute-api.cn-north-1.amazonaws.com.cn/prod')).toEqual({ service: 'execute-api', region: 'cn-north-1' });
    expect(awsEndpointOf('https://xyzabcdefghijklmnop0123456789ab.lambda-url.us-gov-west-1.on.aws/')).toEqual({ service: 'lambda', region: 'us-gov-west-1' });
    expect(awsEndpointOf('http://127.0.0.1:8080')).toBeUndefined();
    expect(awsEndpointOf('https://ingest.example.com/')).toBeUndefined();
    expect(awsEndpointOf('https://execute-api.eu-west-1.amazonaws.com.evil.example/')).toBeUndefined();
  });

  it('auto signs AWS hosts (and hosts given a service), never signs nothing, always needs a service and a region', () => {
    const api = 'https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/';
    expect(signingScopeFor(api, {})).toEqual({ service: 'execute-api', region: 'eu-west-1' });
    expect(signingScopeFor(api, { region: 'us-east-1' })).toEqual({ service: 'execute-api', region: 'us-east-1' });
    expect(signingScopeFor(api, { sign: 'never' })).toBeUndefined();
    expect(signingScopeFor('http://127.0.0.1:8080', {}, {})).toBeUndefined();
    expect(signingScopeFor('http://localhost:4566', { service: 'execute-api' }, { AWS_REGION: 'us-east-1' })).toEqual({ service: 'execute-api', region: 'us-east-1' });
    expect(signingScopeFor('https://ingest.example.com', { sign: 'always', service: 'lambda', region: 'ap-south-1' }, {})).toEqual({ service: 'lambda', region: 'ap-south-1' });
    expect(() => signingScopeFor('https://ingest.example.com', { sign: 'always', region: 'eu-west-1' }, {})).toThrow(
      'publish service: expected execute-api or lambda: the host "ingest.example.com" is neither an HTTP API nor a Function URL, received nothing',
    );
    expect(() => signingScopeFor('https://ingest.example.com', { sign: 'always', service: 'execute-api' }, {})).toThrow(ConfigError);
  });

  it('rejects unknown sign modes', async () => {
    const file = await jsonl(ids(1));
    await expect(publishFile({ url: endpoint.url, stream: 's', file, sign: 'sometimes' as never })).rejects.toThrow(
      'publish sign: expected one of auto, always, never, received "sometimes"',
    );
    expect(endpoint.received).toEqual([]);
  });
});

describe('SigV4', () => {
  it('the hash adapter computes SHA-256 and HMAC-SHA256', async () => {
    const h = new NodeSha256();
    h.update('ab');
    h.update(new TextEncoder().encode('c'));
    expect(Buffer.from(await h.digest()).toString('hex')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    // RFC 4231 test case 2
    const mac = new NodeSha256('Jefe');
    mac.update('what do ya want for nothing?');
    expect(Buffer.from(await mac.digest()).toString('hex')).toBe('5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843');
    mac.reset();
    mac.update('what do ya want for nothing?');
    expect(Buffer.from(await mac.digest()).toString('hex')).toBe('5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843');
  });

  it('signs every batch with the environment credentials, for the forced region and service', async () => {
    const events = ids(7);
    const file = await jsonl(events);
    const result = await publishFile({ url: `${endpoint.url}/`, stream: 'page views', file, batchSize: 3, sign: 'always', region: 'eu-west-1', service: 'execute-api' });
    expect(result).toEqual({ sent: 7, accepted: 7, rejected: [], replayed: [], shed: [] });
    expect(endpoint.received).toHaveLength(3);
    expect(endpoint.enqueued).toEqual(events);
    for (const r of endpoint.received) {
      expect(r.url).toBe('/streams/page%20views/events');
      const v = await verifySignature(r);
      expect(v.ok).toBe(true);
      expect(v.scope).toEqual([CREDS.accessKeyId, String(r.headers['x-amz-date']).slice(0, 8), 'eu-west-1', 'execute-api']);
      expect(v.signedHeaders).toEqual(expect.arrayContaining(['content-type', 'host', 'idempotency-key', 'x-amz-content-sha256', 'x-amz-date', 'x-amz-security-token']));
      expect(r.headers['x-amz-security-token']).toBe(CREDS.sessionToken);
    }
  });

  it('the verification fails for a changed body, other credentials or another scope', async () => {
    const file = await jsonl(ids(2));
    await publishFile({ url: endpoint.url, stream: 's', file, sign: 'always', region: 'eu-west-1', service: 'lambda' });
    const [r] = endpoint.received;
    expect((await verifySignature(r!)).ok).toBe(true);
    expect((await verifySignature({ ...r!, body: r!.body.replace('1', '2') })).ok).toBe(false);
    expect((await verifySignature(r!, { ...CREDS, secretAccessKey: 'another' })).ok).toBe(false);
    const auth = String(r!.headers.authorization).replace('/eu-west-1/', '/eu-west-2/');
    expect((await verifySignature({ ...r!, headers: { ...r!.headers, authorization: auth } })).ok).toBe(false);
  });

  it('sends nothing signed to localhost in auto mode', async () => {
    const file = await jsonl(ids(2));
    await publishFile({ url: endpoint.url, stream: 's', file });
    expect(endpoint.received).toHaveLength(1);
    expect(endpoint.received[0]!.headers.authorization).toBeUndefined();
    expect(endpoint.received[0]!.headers['x-amz-date']).toBeUndefined();
    expect(endpoint.received[0]!.headers['idempotency-key']).toMatch(/^[0-9a-f-]{36}:1-2$/);
  });

  it('loads the signer and the credential chain only to sign', async () => {
    // A child process logs every module it loads; publishes once unsigned, then signed.
    const hooks = join(dir, 'hooks.mjs');
    await writeFile(hooks, "import { writeSync } from 'node:fs';\nexport async function load(url, context, next) { writeSync(2, `LOADED ${url}\\n`); return next(url, context); }\n");
    const register = join(dir, 'register.mjs');
    await writeFile(register, `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`);
    const file = await jsonl(ids(2));
    const script = join(dir, 'child.mjs');
    await writeFile(
      script,
      `const { publishFile } = await import(${JSON.stringify(pathToFileURL(join(ROOT, 'lib/cli/publish.ts')).href)});\n` +
        `const options = { url: ${JSON.stringify(endpoint.url)}, stream: 's', file: ${JSON.stringify(file)} };\n` +
        `await publishFile(options);\nprocess.stderr.write('UNSIGNED DONE\\n');\n` +
        `await publishFile({ ...options, sign: 'always', region: 'eu-west-1', service: 'execute-api' });\n`,
    );
    const stderr = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', register, '--import', 'tsx', script], { cwd: ROOT, env: process.env, stdio: ['ignore', 'ignore', 'pipe'] });
      let err = '';
      child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
      child.on('error', reject);
      child.on('close', (code) => (code === 0 ? resolve(err) : reject(new Error(`child exited ${code}: ${err}`))));
    });
    const [unsigned, signed] = stderr.split('UNSIGNED DONE\n') as [string, string];
    const heavy = /LOADED .*(lib\/cli\/sigv4\.ts|@smithy\/signature-v4|@aws-sdk\/credential-provider-node)/;
    expect(unsigned).toMatch(/LOADED .*lib\/cli\/publish\.ts/);
    expect(unsigned).not.toMatch(heavy);
    expect(unsigned).not.toMatch(/LOADED .*cli-progress/);
    expect(signed).toMatch(/LOADED .*lib\/cli\/sigv4\.ts/);
    expect(signed).toMatch(/LOADED .*@smithy\/signature-v4/);
    expect(endpoint.received.map((r) => r.headers.authorization === undefined)).toEqual([true, false]);
  }, 30_000);
});

describe('retries', () => {
  it('parses Retry-After as seconds or an HTTP date', () => {
    const now = Date.parse('2025-03-01T10:00:00Z');
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter(' 2 ', now)).toBe(2000);
    expect(parseRetryAfter('Sat, 01 Mar 2025 10:00:03 GMT', now)).toBe(3000);
    expect(parseRetryAfter('Sat, 01 Mar 2025 09:59:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter(null, now)).toBeUndefined();
  });

  it('resends a batch refused with 429 once, with the same body, signature scope and Idempotency-Key', async () => {
    let refused = 0;
    endpoint.answer = (r, n) => {
      if (n === 2 || n === 3) {
        refused++;
        // Seconds once, an HTTP date (now: no wait) once.
        return { status: 429, headers: { 'retry-after': n === 2 ? '0' : new Date().toUTCString() }, body: { message: 'Too Many Requests' } };
      }
      return endpoint.accept(r);
    };
    const events = ids(6);
    const file = await jsonl(events);
    const result = await publishFile({ url: endpoint.url, stream: 's', file, batchSize: 2, sign: 'always', region: 'us-east-1', service: 'execute-api' });
    expect(result).toEqual({ sent: 6, accepted: 6, rejected: [], replayed: [], shed: [] });
    expect(refused).toBe(2);
    expect(endpoint.received.map((r) => r.body)).toEqual(['{"id":0}\n{"id":1}\n', '{"id":2}\n{"id":3}\n', '{"id":2}\n{"id":3}\n', '{"id":2}\n{"id":3}\n', '{"id":4}\n{"id":5}\n']);
    const k = keys();
    expect(new Set(k).size).toBe(3);
    expect(k[1]).toBe(k[2]);
    expect(k[2]).toBe(k[3]);
    for (const r of endpoint.received) expect((await verifySignature(r)).ok).toBe(true);
    expect(endpoint.enqueued).toEqual(events);
  });

  it('resends after 5xx with the same Idempotency-Key, so a partly enqueued batch is not enqueued twice', async () => {
    endpoint.answer = (r, n) => {
      if (n === 1) {
        endpoint.accept(r); // enqueued, but the answer says the outcome is unknown
        return { status: 503, headers: { 'retry-after': '0' }, body: { error: 'outcome_unknown', message: 'SQS did not confirm 3 events' } };
      }
      if (n === 2) return { status: 502, body: { message: 'Internal Server Error' } }; // no Retry-After: backoff
      return endpoint.accept(r);
    };
    const events = ids(3);
    const file = await jsonl(events);
    const result = await publishFile({ url: endpoint.url, stream: 's', file, retryBaseMs: 1 });
    expect(result).toEqual({ sent: 3, accepted: 3, rejected: [], replayed: [], shed: [] });
    expect(endpoint.received).toHaveLength(3);
    expect(new Set(keys()).size).toBe(1);
    expect(endpoint.enqueued).toEqual(events);
  });

  it('reports a batch answered as a replay (its first answer lost): counted once, named with its key', async () => {
    let first: Answer | undefined;
    endpoint.answer = (r, n) => {
      if (n === 1) {
        first = endpoint.accept(r); // taken; the answer is lost on the way back
        return { status: 502, body: { message: 'Internal Server Error' } };
      }
      return { status: 202, headers: { 'idempotent-replayed': 'true' }, body: { ...(first!.body as object), replay: true } };
    };
    const file = await jsonl(ids(3));
    const out: string[] = [];
    const saved = process.exitCode;
    await publishCommand('s', file, { url: endpoint.url, batchSize: '10', sign: 'never' }, (l) => out.push(l));
    expect(process.exitCode).toBe(saved);
    expect(out[0]).toBe(`published ${file} to "s": 3 accepted, 0 rejected`);
    expect(out[1]).toMatch(/^ {2}lines 1-3: already accepted \(a replay of Idempotency-Key [0-9a-f-]{36}:1-3; its first answer, nothing enqueued twice\)$/);
    expect(endpoint.enqueued).toEqual(ids(3));
  });

  it('fails on a 409 at once, with the endpoint\'s explanation, the lines and the key', async () => {
    endpoint.answer = () => ({ status: 409, body: { error: 'idempotency_outcome_unknown', message: 'the first request with Idempotency-Key "k" has no recorded outcome' } });
    const file = await jsonl(ids(2));
    const publishing = publishFile({ url: endpoint.url, stream: 's', file, retries: 3, retryBaseMs: 1 });
    await expect(publishing).rejects.toThrow(PublishRefusedError);
    await expect(publishing).rejects.toThrow(
      /refused lines 1-2 with Idempotency-Key [0-9a-f-]{36}:1-2 \(HTTP 409 idempotency_outcome_unknown\): the first request with Idempotency-Key "k" has no recorded outcome; lines 1-2 were not accepted \(0 events/,
    );
    expect(endpoint.received).toHaveLength(1);
  });

  it('gives up after `retries` 5xx answers, naming the lines and the key', async () => {
    endpoint.answer = () => ({ status: 503, headers: { 'retry-after': '0' }, body: { error: 'outcome_unknown', message: 'SQS did not confirm 2 events', unconfirmed: [0, 1] } });
    const file = await jsonl(ids(4));
    const publishing = publishFile({ url: endpoint.url, stream: 's', file, batchSize: 2, retries: 2, retryBaseMs: 1 });
    await expect(publishing).rejects.toThrow(PublishRefusedError);
    await expect(publishing).rejects.toThrow(
      /answered HTTP 503 3 times \(last: SQS did not confirm 2 events\); some of lines 1-2 may have been enqueued \(Idempotency-Key: [0-9a-f-]{36}:1-2\); 0 events from earlier lines were accepted/,
    );
    expect(endpoint.received).toHaveLength(3);
    expect(new Set(keys()).size).toBe(1);
  });

  it('gives up after `retries` 429s with a BackPressureError', async () => {
    endpoint.answer = (r, n) => (n === 1 ? endpoint.accept(r) : { status: 429, headers: { 'retry-after': '0' }, body: { message: 'Too Many Requests' } });
    const file = await jsonl(ids(3));
    const publishing = publishFile({ url: endpoint.url, stream: 's', file, batchSize: 2, retries: 1 });
    await expect(publishing).rejects.toThrow(BackPressureError);
    await expect(publishing).rejects.toThrow(/still saturated after 1 retries; lines 3 were not enqueued \(2 events from earlier lines were accepted\)/);
    expect(endpoint.received).toHaveLength(3);
  });
});

describe('403', () => {
  it('blames the credentials or their IAM grant, with the answer\'s message, and does not retry', async () => {
    const message = `User: arn:aws:iam::123456789012:user/ci is not authorized to perform: execute-api:Invoke on resource: arn:aws:execute-api:eu-west-1:123456789012:abc/$default/POST/streams/s/events`;
    endpoint.answer = () => ({ status: 403, body: { message } });
    const file = await jsonl(ids(2));
    const publishing = publishFile({ url: endpoint.url, stream: 's', file, sign: 'always', region: 'eu-west-1', service: 'execute-api' });
    await expect(publishing).rejects.toThrow(PublishRefusedError);
    const err = (await publishing.catch((e: unknown) => e)) as PublishRefusedError;
    expect(err.status).toBe(403);
    expect(err.message).toContain(`answered HTTP 403 (${message})`);
    expect(err.message).toContain(`access key ${CREDS.accessKeyId}, service execute-api, region eu-west-1`);
    expect(err.message).toContain('execute-api:Invoke: SluiceJob.grantPublish(role) grants it');
    expect(err.message).toContain('lines 1-2 were not accepted');
    expect(err.message).not.toContain(CREDS.secretAccessKey);
    expect(endpoint.received).toHaveLength(1);
  });

  it("reads a Function URL's Message, and says when the request was not signed", async () => {
    endpoint.answer = () => ({ status: 403, body: { Message: 'Forbidden. For troubleshooting Function URL authorization issues, see ...' } });
    const file = await jsonl(ids(1));
    await expect(publishFile({ url: endpoint.url, stream: 's', file, sign: 'always', region: 'eu-west-1', service: 'lambda' })).rejects.toThrow(
      /HTTP 403 \(Forbidden\. For troubleshooting .*\): the endpoint refused the credentials .*lambda:InvokeFunctionUrl: SluiceJob\.grantPublish/,
    );
    await expect(publishFile({ url: endpoint.url, stream: 's', file })).rejects.toThrow(
      /HTTP 403 \(Forbidden\..*\): the request was not signed; an endpoint with IAM auth needs SigV4 \(publish with --sign always --region <region> --service <execute-api\|lambda>\)/,
    );
  });
});

