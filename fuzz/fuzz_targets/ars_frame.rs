//! Fuzz target: arbitrary bytes through the Actor Runtime Socket v1 frame
//! splitter and every payload decoder, in both directions. Decoding must
//! return a value or a typed error, never panic; a decoded frame must
//! re-encode, and its encoding must decode again. (Byte identity is not
//! required: BARE readers accept non-minimal varints.)

#![no_main]

use agentos_protocol::ars;
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoder = ars::FrameDecoder::new(1 << 16);
    let mut buf = BytesMut::from(data);
    while let Ok(Some(payload)) = decoder.decode(&mut buf) {
        check(payload);
    }
    check(Bytes::copy_from_slice(data));
});

fn check(payload: Bytes) {
    let _ = ars::decode_client_hello(payload.clone());
    let _ = ars::decode_server_hello(payload.clone());
    if let Ok(frame) = ars::decode_client_frame(payload.clone()) {
        let again = ars::encode_client_frame(&frame).expect("re-encode");
        assert!(ars::decode_client_frame(Bytes::from(again)).is_ok());
    }
    if let Ok(frame) = ars::decode_server_frame(payload.clone()) {
        let again = ars::encode_server_frame(&frame).expect("re-encode");
        assert!(ars::decode_server_frame(Bytes::from(again)).is_ok());
    }
}
