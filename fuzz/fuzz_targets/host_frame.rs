//! Fuzz target: arbitrary bytes through the host protocol's frame decoder and
//! message classifier. Every input must end as frames, a typed frame error or
//! a classified message (request, notification, response or an invalid
//! message with its JSON-RPC error); nothing may panic, and every error
//! answer must encode.

#![no_main]

use agentos_protocol::host::{decode_message, response_frame, FrameDecoder, Inbound};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // As a byte stream, fed in two uneven pieces.
    let mut decoder = FrameDecoder::new(1 << 16);
    let split = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    decoder.push(&data[..split]);
    decoder.push(&data[split..]);
    while let Ok(Some(frame)) = decoder.next_frame() {
        classify(&frame);
    }
    // As one frame's payload.
    classify(data);
});

fn classify(payload: &[u8]) {
    if let Inbound::Invalid { id, error } = decode_message(payload) {
        // An error answer always frames (it is small), and the frame
        // decodes back to one whole frame.
        let frame = response_frame(&id, Err(&error)).expect("an error answer frames");
        let mut decoder = FrameDecoder::new(u64::MAX);
        decoder.push(&frame);
        assert!(matches!(decoder.next_frame(), Ok(Some(_))));
        assert!(decoder.next_length().is_none());
    }
}
