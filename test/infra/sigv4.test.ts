/** The e2e test's SigV4 signer against AWS's published test suite (get-vanilla, post-vanilla). */
import { describe, expect, it } from 'vitest';
import { signRequest } from './support/sigv4.ts';

const credentials = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY' };
const now = new Date(Date.UTC(2015, 7, 30, 12, 36, 0));

describe('SigV4', () => {
  it('signs get-vanilla as AWS does', () => {
    const h = signRequest({ method: 'GET', url: 'https://example.amazonaws.com/', service: 'service', region: 'us-east-1', credentials, now });
    expect(h.authorization).toBe(
      'AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31',
    );
    expect(h['x-amz-date']).toBe('20150830T123600Z');
  });

  it('signs post-vanilla as AWS does', () => {
    const h = signRequest({ method: 'POST', url: 'https://example.amazonaws.com/', service: 'service', region: 'us-east-1', credentials, now });
    expect(h.authorization).toContain('Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b');
  });
});
