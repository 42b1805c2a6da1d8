/** The fauxqs starter lives in the library (lib/testing/local-aws/servers.ts): `--target local-aws` uses it too. */
export { startFauxqs } from '../../lib/testing/local-aws/servers.ts';
