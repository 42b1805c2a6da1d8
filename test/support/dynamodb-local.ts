/** The DynamoDB Local starter lives in the library (lib/testing/local-aws/servers.ts): `--target local-aws` uses it too. */
export { dynamoDbLocalDir, freePort, LOCAL_CREDENTIALS, LOCAL_REGION, type LocalServer, SIMULATOR_PACKAGE, startDynamoDbLocal } from '../../lib/testing/local-aws/servers.ts';
