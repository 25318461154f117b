//! A real DNS server for tests (`hickory-server` on a loopback UDP port): it answers TXT
//! queries with the records a test publishes, and NXDOMAIN for any other name. Tests point the
//! service at it with `DNS_RESOLVER`.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use hickory_proto::{
    op::{Header, HeaderCounts, Metadata, ResponseCode},
    rr::{Name, RData, Record, RecordType, rdata::TXT},
};
use hickory_server::{
    Server,
    net::runtime::Time,
    server::{Request, RequestHandler, ResponseHandler, ResponseInfo},
    zone_handler::MessageResponseBuilder,
};

/// TXT records by lowercase name without the final dot, each record as its strings.
type Zone = Arc<Mutex<HashMap<String, Vec<Vec<String>>>>>;

struct Handler {
    zone: Zone,
    queries: Arc<Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let builder = MessageResponseBuilder::from_message_request(request);
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        let Ok(info) = request.request_info() else {
            let response = builder.error_msg(&request.metadata, ResponseCode::FormErr);
            return send(&mut response_handle, response, &request.metadata).await;
        };
        let asked = info.query.name().to_string();
        let name = asked.trim_end_matches('.').to_ascii_lowercase();
        if let Ok(mut queries) = self.queries.lock() {
            queries.push(name.clone());
        }
        let records: Vec<Vec<String>> = self
            .zone
            .lock()
            .ok()
            .and_then(|zone| zone.get(&name).cloned())
            .unwrap_or_default();
        let owner = Name::from_ascii(&asked).unwrap_or_default();
        let answers: Vec<Record> = if info.query.query_type() == RecordType::TXT {
            records
                .into_iter()
                .map(|strings| Record::from_rdata(owner.clone(), 60, RData::TXT(TXT::new(strings))))
                .collect()
        } else {
            Vec::new()
        };
        if answers.is_empty() {
            let response = builder.error_msg(&request.metadata, ResponseCode::NXDomain);
            return send(&mut response_handle, response, &request.metadata).await;
        }
        let response = builder.build(metadata, answers.iter(), [], [], []);
        match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(_) => ResponseInfo::from(fallback(&request.metadata)),
        }
    }
}

/// What a failed send is recorded as.
fn fallback(request: &Metadata) -> Header {
    let mut metadata = Metadata::response_from_request(request);
    metadata.response_code = ResponseCode::ServFail;
    Header {
        metadata,
        counts: HeaderCounts::default(),
    }
}

async fn send<'a, R: ResponseHandler>(
    handle: &mut R,
    response: hickory_server::zone_handler::MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
    request: &Metadata,
) -> ResponseInfo {
    match handle.send_response(response).await {
        Ok(info) => info,
        Err(_) => ResponseInfo::from(fallback(request)),
    }
}

/// A DNS server on `127.0.0.1`, UDP, answering what the test publishes.
pub struct TestDns {
    pub addr: SocketAddr,
    zone: Zone,
    queries: Arc<Mutex<Vec<String>>>,
    server: Server<Handler>,
}

impl TestDns {
    pub async fn start() -> TestDns {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind a UDP port");
        let addr = socket.local_addr().expect("address");
        let zone: Zone = Arc::default();
        let queries: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut server = Server::new(Handler {
            zone: zone.clone(),
            queries: queries.clone(),
        });
        server.register_socket(socket);
        TestDns {
            addr,
            zone,
            queries,
            server,
        }
    }

    /// `DNS_RESOLVER` for the service: `127.0.0.1:<port>`.
    pub fn resolver(&self) -> String {
        self.addr.to_string()
    }

    /// Publishes one more TXT record (of one string) at `name`.
    pub fn publish_txt(&self, name: &str, value: &str) {
        if let Ok(mut zone) = self.zone.lock() {
            zone.entry(name.trim_end_matches('.').to_ascii_lowercase())
                .or_default()
                .push(vec![value.to_owned()]);
        }
    }

    /// Removes every record at `name`.
    pub fn remove(&self, name: &str) {
        if let Ok(mut zone) = self.zone.lock() {
            zone.remove(&name.trim_end_matches('.').to_ascii_lowercase());
        }
    }

    /// The names asked about so far, lowercase without the final dot.
    pub fn queries(&self) -> Vec<String> {
        self.queries.lock().map(|q| q.clone()).unwrap_or_default()
    }
}

impl Drop for TestDns {
    fn drop(&mut self) {
        self.server.shutdown_token().cancel();
    }
}
