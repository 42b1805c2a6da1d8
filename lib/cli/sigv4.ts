/**
 * SigV4 signing of `sluice publish` requests, for ingestion endpoints behind IAM auth (an
 * HTTP API, service `execute-api`, or a Lambda Function URL, service `lambda`). The
 * algorithm is @smithy/signature-v4's; credentials come from the AWS SDK's default chain
 * (environment, shared config and SSO, web identity, container and instance metadata).
 *
 * publish.ts imports this module only when a request is to be signed: the credential
 * chain is slow to load, and posting to `sluice dev` on localhost needs none of it.
 */
import { createHash, createHmac, type Hash, type Hmac } from 'node:crypto';
import { defaultProvider } from '@aws-sdk/credential-provider-node';
import { SignatureV4 } from '@smithy/signature-v4';

export interface SigningScope {
  readonly region: string;
  readonly service: string;
}

export interface StaticCredentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken?: string;
}

export interface RequestToSign {
  readonly method: string;
  readonly url: URL;
  /** Header names in lower case. */
  readonly headers: Record<string, string>;
  readonly body: string;
}

export interface RequestSigner {
  readonly scope: SigningScope;
  /** The credentials' access key id (to name them in errors; never the secret). */
  readonly accessKeyId: string;
  /** The headers to send: `headers` plus authorization, x-amz-date, x-amz-content-sha256 (and x-amz-security-token). */
  sign(request: RequestToSign): Promise<Record<string, string>>;
}

type SourceData = string | ArrayBuffer | ArrayBufferView;

/** SHA-256 and HMAC-SHA256 from node:crypto, in the shape the signer asks for (what @smithy/hash-node does). */
export class NodeSha256 {
  private hash: Hash | Hmac;
  constructor(private readonly secret?: SourceData) {
    this.hash = NodeSha256.create(secret);
  }
  update(data: SourceData, encoding?: 'utf8' | 'ascii' | 'latin1'): void {
    if (typeof data === 'string') this.hash.update(data, encoding ?? 'utf8');
    else this.hash.update(toBytes(data));
  }
  digest(): Promise<Uint8Array> {
    return Promise.resolve(new Uint8Array(this.hash.digest()));
  }
  reset(): void {
    this.hash = NodeSha256.create(this.secret);
  }
  private static create(secret?: SourceData): Hash | Hmac {
    if (secret === undefined) return createHash('sha256');
    return createHmac('sha256', typeof secret === 'string' ? Buffer.from(secret, 'utf8') : toBytes(secret));
  }
}

function toBytes(data: ArrayBuffer | ArrayBufferView): Uint8Array {
  return ArrayBuffer.isView(data) ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : new Uint8Array(data);
}

/** The request as @smithy/signature-v4 takes it (its HttpRequest shape). */
export function signable(request: RequestToSign) {
  const query: Record<string, string | string[]> = {};
  for (const [k, v] of request.url.searchParams) {
    const had = query[k];
    query[k] = had === undefined ? v : Array.isArray(had) ? [...had, v] : [had, v];
  }
  return {
    method: request.method,
    protocol: request.url.protocol,
    hostname: request.url.hostname,
    port: request.url.port ? Number(request.url.port) : undefined,
    path: request.url.pathname,
    query,
    // url.host omits the default port, as the Host header fetch sends does.
    headers: { ...request.headers, host: request.url.host },
    body: request.body,
  };
}

/**
 * A signer for `scope`, with `credentials` or else the default chain's. Resolves the
 * credentials now, so a machine without any fails before the first batch is read.
 */
export async function createRequestSigner(scope: SigningScope, credentials?: StaticCredentials): Promise<RequestSigner> {
  // The chain is memoized and refreshes credentials that expire during a long publish.
  const provider = credentials ? async () => credentials : defaultProvider();
  let first: StaticCredentials;
  try {
    first = await provider();
  } catch (err) {
    throw new Error(
      `cannot sign requests for ${scope.service} in ${scope.region}: no AWS credentials found (${(err as Error).message}). ` +
        'Set AWS_PROFILE (after `aws sso login` or `aws configure`), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; ' +
        'or publish with --sign never if the endpoint does not use IAM auth',
      { cause: err },
    );
  }
  const signer = new SignatureV4({ credentials: provider, region: scope.region, service: scope.service, sha256: NodeSha256 });
  return {
    scope,
    accessKeyId: first.accessKeyId,
    async sign(request) {
      const signed = await signer.sign(signable(request));
      const headers: Record<string, string> = {};
      // fetch sets Host itself, from the URL: the value signed above.
      for (const [k, v] of Object.entries(signed.headers)) if (k.toLowerCase() !== 'host') headers[k] = String(v);
      return headers;
    },
  };
}
