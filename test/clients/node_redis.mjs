// node-redis (the "redis" npm package) against a cachecast Redis door.
// Run by test/clients_test.go: node node_redis.mjs SOCKET PREFIX. Prints
// "ok" when every check passed; throws (exit code 1) otherwise.
import assert from 'node:assert/strict';
import { createClient } from 'redis';

const [sock, prefix] = process.argv.slice(2);
const k = (name) => `${prefix}:${name}`;
const client = createClient({ socket: { path: sock } });
client.on('error', (err) => { console.error(err); process.exit(1); });
await client.connect();

assert.equal(await client.set(k('plain'), '1'), 'OK');
assert.equal(await client.get(k('plain')), '1');

const got = await client.multi().set(k('a'), '1').set(k('b'), '2').get(k('a')).exec();
assert.deepEqual(got, ['OK', 'OK', '1']);
assert.deepEqual(await client.mGet([k('a'), k('b')]), ['1', '2']);

await client.quit();
console.log('ok');
