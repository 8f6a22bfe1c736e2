//! Actor Runtime Socket v1 frames: ClientHello/ServerHello, Request/Response, GoAway.
