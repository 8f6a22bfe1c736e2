// Builds Seed hypermedia blobs with Seed's own published client
// (@seed-hypermedia/client): the encoders its agents server publishes
// with. The Rust cross-implementation test drives it; it is not a library.
//
//   node seed-blobs.mjs < cases.json    prints one JSON answer per case, as a list
//
// Each case names a `kind` and a `seedHex` (the signer's 32-byte seed);
// `ts` (Unix ms) is what Date.now answers while the case is built.
//   profile    {name, avatar?, description?}            -> {hex, cid}
//   genesis    {}                                       -> {hex, cid}
//   change     {ops, depth?}  (genesis and deps: the signer's genesis) -> {hex, cid}
//   ref        {space, path, genesis, generation, version? | redirect?: {targetSpace?, targetPath, republish?}
//               | tombstone: true, capability?}         -> {hex}
//   comment    {content, docUid, docPath, docVersion, replyCommentVersion?, rootReplyCommentVersion?,
//               commentId? (an edit), delete? (a tombstone)} -> {hex, recordId}
//   contact    {subjectUid, name?}                      -> {hex, recordId}
//   capability {delegateUid, role, path?, label?}       -> {hex}
//   file       {fill, length}                           -> {root, blocks: [{cid, sha256}]}
//   publish    {blobs: [{cid?, hex}]}                   -> {bodyHex}  (the PublishBlobs request body)
//
// The peers folder is .peers/ at the workspace root (override with
// AGENTOS_PEERS); the client is in its own folder there, seed-client/, and
// is ESM-only, so it is imported by file.

import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import {fileURLToPath, pathToFileURL} from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const peers = process.env.AGENTOS_PEERS ?? path.resolve(here, '../../../.peers')
const root = path.join(peers, 'seed-client', 'node_modules', '@seed-hypermedia', 'client', 'dist')
const load = (name) => import(pathToFileURL(path.join(root, `${name}.mjs`)).href)

const seed = await load('index')
const blobs = await load('blobs')

const fromHex = (hex) => new Uint8Array(Buffer.from(hex, 'hex'))
const toHex = (bytes) => Buffer.from(bytes).toString('hex')

function signerOf(seedHex) {
  const pair = blobs.nobleKeyPairFromSeed(fromHex(seedHex))
  return {pair, signer: {getPublicKey: async () => pair.principal, sign: (data) => pair.sign(data)}}
}

async function build(item) {
  const {pair, signer} = signerOf(item.seedHex)
  const me = blobs.principalToString(pair.principal)
  switch (item.kind) {
    case 'profile': {
      const opts = {name: item.name}
      if (item.avatar !== undefined) opts.avatar = item.avatar
      if (item.description !== undefined) opts.description = item.description
      const blob = await blobs.createProfile(signer, opts, item.ts)
      return {hex: toHex(blob.data), cid: blob.cid.toString()}
    }
    case 'genesis': {
      const blob = await seed.createGenesisChange(signer)
      return {hex: toHex(blob.bytes), cid: blob.cid.toString()}
    }
    case 'change': {
      const genesis = await seed.createGenesisChange(signer)
      const {unsignedBytes} = seed.createChangeOps({
        ops: item.ops,
        genesisCid: genesis.cid,
        deps: [genesis.cid],
        depth: item.depth ?? 1,
      })
      const blob = await seed.createChange(unsignedBytes, signer)
      return {hex: toHex(blob.bytes), cid: blob.cid.toString()}
    }
    case 'ref': {
      const common = {space: item.space, path: item.path, genesis: item.genesis, generation: item.generation}
      if (item.capability) common.capability = item.capability
      let made
      if (item.tombstone) made = await seed.createTombstoneRef(common, signer)
      else if (item.redirect) made = await seed.createRedirectRef({...common, ...item.redirect}, signer)
      else made = await seed.createVersionRef({...common, version: item.version}, signer)
      return {hex: toHex(made.blobs[0].data)}
    }
    case 'comment': {
      let made
      if (item.delete) {
        made = await seed.deleteComment(
          {commentId: item.commentId, targetAccount: item.docUid, targetPath: item.docPath, targetVersion: item.docVersion},
          signer,
        )
      } else if (item.commentId) {
        made = await seed.updateComment(
          {
            commentId: item.commentId,
            targetAccount: item.docUid,
            targetPath: item.docPath,
            targetVersion: item.docVersion,
            content: item.content,
            replyParentVersion: item.replyCommentVersion,
            rootReplyCommentVersion: item.rootReplyCommentVersion,
          },
          signer,
        )
      } else {
        const docId = seed.unpackHmId(`hm://${item.docUid}${item.docPath}`)
        made = await seed.createComment(
          {
            content: item.content,
            docId,
            docVersion: item.docVersion,
            replyCommentVersion: item.replyCommentVersion,
            rootReplyCommentVersion: item.rootReplyCommentVersion,
          },
          signer,
        )
      }
      const data = made.blobs[0].data
      return {hex: toHex(data), recordId: await seed.commentRecordIdFromBlob(data)}
    }
    case 'contact': {
      const made = await seed.createContact({subjectUid: item.subjectUid, name: item.name}, signer)
      return {hex: toHex(made.blobs[0].data), recordId: made.recordId}
    }
    case 'capability': {
      const input = {delegateUid: item.delegateUid, role: item.role}
      if (item.path) input.path = item.path
      if (item.label) input.label = item.label
      const made = await seed.createCapability(input, signer)
      return {hex: toHex(made.blobs[0].data)}
    }
    case 'file': {
      const made = await seed.fileToIpfsBlobs(new Uint8Array(item.length).fill(item.fill))
      return {
        root: made.cid,
        blocks: made.blobs.map((b) => ({cid: b.cid, sha256: crypto.createHash('sha256').update(b.data).digest('hex')})),
      }
    }
    case 'publish': {
      let body
      const fetch = async (_url, init) => {
        body = init.body
        return new Response(JSON.stringify({json: {cids: []}}), {status: 200, headers: {'content-type': 'application/json'}})
      }
      const client = seed.createSeedClient('http://seed.invalid', {fetch})
      const input = item.blobs.map((b) => (b.cid ? {cid: b.cid, data: fromHex(b.hex)} : {data: fromHex(b.hex)}))
      await client.publishBlobs({blobs: input})
      return {bodyHex: toHex(new Uint8Array(body))}
    }
    default:
      throw new Error(`unknown kind ${item.kind} (signer ${me})`)
  }
}

const cases = JSON.parse(fs.readFileSync(0, 'utf8'))
const realNow = Date.now
const answers = []
for (const item of cases) {
  Date.now = () => item.ts ?? realNow()
  try {
    answers.push(await build(item))
  } finally {
    Date.now = realNow
  }
}
process.stdout.write(JSON.stringify(answers))
