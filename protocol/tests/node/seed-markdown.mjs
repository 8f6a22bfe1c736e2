// Runs Seed's own markdown converter (@seed-hypermedia/client's
// markdown-to-blocks) over a list of markdown documents, for the Rust
// cross-implementation test (protocol/tests/markdown_node.rs). It is not a
// library.
//
//   node seed-markdown.mjs < documents.json    prints one answer per document, as a list
//
// Each answer is {tree, metadata, metadataKeys, hmNodes, ops}: parseMarkdown's
// tree and metadata (and the metadata's keys in order),
// markdownBlockNodesToHMBlockNodes(tree) and flattenToOperations(tree). A
// parse that throws answers {error: message}.
//
// Block ids the markdown does not give come from Math.random, which is
// replaced here by a deterministic sequence, restarted before each
// document: a 32-bit linear congruential generator (state = state *
// 1664525 + 1013904223 mod 2^32, from state 0), each call answering
// state / 2^32. The client picks an id character as
// ID_CHARS[floor(random * 64)], which is then the state's top six bits; the
// Rust test's id source replays the same sequence.
//
// The peers folder is .peers/ at the workspace root (override with
// AGENTOS_PEERS); the client is in its own folder there, seed-client/, and
// is ESM-only, so it is imported by file.

import fs from 'node:fs'
import path from 'node:path'
import {fileURLToPath, pathToFileURL} from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const peers = process.env.AGENTOS_PEERS ?? path.resolve(here, '../../../.peers')
const root = path.join(peers, 'seed-client', 'node_modules', '@seed-hypermedia', 'client', 'dist')
const load = (name) => import(pathToFileURL(path.join(root, `${name}.mjs`)).href)

const md = await load('markdown-to-blocks')

let state = 0
Math.random = () => {
  state = (Math.imul(state, 1664525) + 1013904223) >>> 0
  return state / 4294967296
}

const documents = JSON.parse(fs.readFileSync(0, 'utf8'))
const answers = documents.map((markdown) => {
  state = 0
  try {
    const {tree, metadata} = md.parseMarkdown(markdown)
    return {
      tree,
      metadata,
      // The keys as JSON lists them (a key set to undefined is left out).
      metadataKeys: Object.keys(JSON.parse(JSON.stringify(metadata))),
      hmNodes: md.markdownBlockNodesToHMBlockNodes(tree),
      ops: md.flattenToOperations(tree),
    }
  } catch (e) {
    return {error: String(e && e.message)}
  }
})
process.stdout.write(JSON.stringify(answers))
