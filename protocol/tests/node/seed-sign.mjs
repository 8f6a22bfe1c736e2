// Signs and verifies Seed Agents envelopes and Capability blobs the way
// Seed's own client does, with the libraries it uses: @ipld/dag-cbor for
// canonical DAG-CBOR, @noble/curves for Ed25519, multiformats for CIDs; and
// encodes JSON values as that client encodes JavaScript values.
// The Rust cross-implementation tests drive it; it is not a library.
//
//   node seed-sign.mjs sign '<spec json>'        prints the envelope hex
//   node seed-sign.mjs verify <envelope hex>     prints {"ok":true,...} or exits 1
//   node seed-sign.mjs capability '<spec json>'  prints {"blobHex","cid"}
//   node seed-sign.mjs encode '<list json>'      prints a list of hex strings
//
// Without the second argument, it is read from standard input (for inputs
// longer than one command-line argument may be).
//
// A sign spec: {seedHex, accountSeedHex?, tsMs, action, protocol?,
// capability?, capabilityBlobHex?}. A capability spec: {issuerSeedHex,
// delegateSeedHex, role, tsMs, path?, label?}. In `action`, a byte string is
// written as in DAG-JSON: {"/": {"bytes": "<base64, no padding>"}}.
//
// An encode list holds {"json": "<JSON text>"}, encoded as
// dagCbor.encode(JSON.parse(text)), or {"bigint": "<decimal integer>"},
// encoded as dagCbor.encode(BigInt(text)).
//
// The peers folder is .peers/ at the workspace root (override with
// AGENTOS_PEERS); its packages are ESM-only, so they are imported by file.

import fs from 'node:fs'
import path from 'node:path'
import {fileURLToPath, pathToFileURL} from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const peers = process.env.AGENTOS_PEERS ?? path.resolve(here, '../../../.peers')

function peer(name, subpath = '.') {
  const dir = path.join(peers, 'node_modules', name)
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'))
  let entry = manifest.exports?.[subpath] ?? (subpath === '.' ? manifest.main : undefined)
  while (entry && typeof entry === 'object') entry = entry.import ?? entry.default
  if (typeof entry !== 'string') throw new Error(`cannot resolve ${name} ${subpath}`)
  return import(pathToFileURL(path.join(dir, entry)).href)
}

const dagCbor = await peer('@ipld/dag-cbor')
const {ed25519} = await peer('@noble/curves', './ed25519.js')
const {CID} = await peer('multiformats', './cid')
const {sha256} = await peer('multiformats', './hashes/sha2')

const ED25519_PREFIX = [0xed, 0x01]

const fromHex = (hex) => new Uint8Array(Buffer.from(hex, 'hex'))
const toHex = (bytes) => Buffer.from(bytes).toString('hex')

function principal(seed) {
  return new Uint8Array([...ED25519_PREFIX, ...ed25519.getPublicKey(seed)])
}

// DAG-JSON's byte form to a Uint8Array, everything else as JSON reads it.
function fromDagJson(value) {
  if (Array.isArray(value)) return value.map(fromDagJson)
  if (value && typeof value === 'object') {
    const keys = Object.keys(value)
    if (keys.length === 1 && keys[0] === '/' && typeof value['/']?.bytes === 'string') {
      return new Uint8Array(Buffer.from(value['/'].bytes, 'base64'))
    }
    return Object.fromEntries(keys.map((key) => [key, fromDagJson(value[key])]))
  }
  return value
}

// Seed's client: drop undefined fields (they would encode as null), sign the
// canonical encoding with sig zeroed, then encode again with the signature.
function sign(spec) {
  const seed = fromHex(spec.seedHex)
  const signer = principal(seed)
  const account = spec.accountSeedHex ? principal(fromHex(spec.accountSeedHex)) : signer
  const envelope = {
    type: 'AgentsAction',
    signer,
    sig: new Uint8Array(64),
    account,
    action: {...fromDagJson(spec.action), ts: spec.tsMs},
  }
  if (spec.protocol !== undefined) envelope.protocol = spec.protocol
  if (spec.capability !== undefined) envelope.capability = spec.capability
  if (spec.capabilityBlobHex !== undefined) envelope.capabilityBlob = fromHex(spec.capabilityBlobHex)
  envelope.sig = ed25519.sign(dagCbor.encode(envelope), seed)
  return toHex(dagCbor.encode(envelope))
}

// Seed's server: decode, check the shape, rebuild with sig zeroed,
// re-encode, verify.
function verify(hex) {
  const envelope = dagCbor.decode(fromHex(hex))
  if (envelope.type !== 'AgentsAction') throw new Error('not an AgentsAction')
  for (const key of ['signer', 'account']) {
    const value = envelope[key]
    if (!(value instanceof Uint8Array) || value.length !== 34 || value[0] !== 0xed || value[1] !== 0x01) {
      throw new Error(`bad ${key}`)
    }
  }
  if (!(envelope.sig instanceof Uint8Array) || envelope.sig.length !== 64) throw new Error('bad sig')
  if (typeof envelope.action?._ !== 'string') throw new Error('bad action')
  if (!Number.isInteger(envelope.action.ts)) throw new Error('bad ts')
  const unsigned = dagCbor.encode({...envelope, sig: new Uint8Array(64)})
  if (!ed25519.verify(envelope.sig, unsigned, envelope.signer.slice(2))) throw new Error('Invalid signature')
  return {ok: true, action: envelope.action._, ts: envelope.action.ts, canonical: toHex(dagCbor.encode(envelope)) === hex}
}

// Seed's createCapability: only the options that are set go into the blob.
async function capability(spec) {
  const seed = fromHex(spec.issuerSeedHex)
  const blob = {
    type: 'Capability',
    signer: principal(seed),
    sig: new Uint8Array(64),
    ts: spec.tsMs,
    delegate: principal(fromHex(spec.delegateSeedHex)),
    role: spec.role,
  }
  if (spec.path !== undefined) blob.path = spec.path
  if (spec.label !== undefined) blob.label = spec.label
  blob.sig = ed25519.sign(dagCbor.encode(blob), seed)
  const data = dagCbor.encode(blob)
  const cid = CID.createV1(dagCbor.code, await sha256.digest(data))
  return {blobHex: toHex(data), cid: cid.toString()}
}

// Each item of the list as Seed's client would write it.
function encode(items) {
  return items.map((item) => {
    const value = 'bigint' in item ? BigInt(item.bigint) : JSON.parse(item.json)
    return toHex(dagCbor.encode(value))
  })
}

const command = process.argv[2]
try {
  const argument = process.argv[3] ?? fs.readFileSync(0, 'utf8').trim()
  switch (command) {
    case 'sign':
      process.stdout.write(sign(JSON.parse(argument)) + '\n')
      break
    case 'verify':
      process.stdout.write(JSON.stringify(verify(argument)) + '\n')
      break
    case 'capability':
      process.stdout.write(JSON.stringify(await capability(JSON.parse(argument))) + '\n')
      break
    case 'encode':
      process.stdout.write(JSON.stringify(encode(JSON.parse(argument))) + '\n')
      break
    default:
      throw new Error(`unknown command ${command}`)
  }
} catch (error) {
  process.stderr.write(`seed-sign: ${error.message}\n`)
  process.exit(1)
}
