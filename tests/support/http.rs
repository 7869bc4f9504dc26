//! A minimal HTTP/1.1 client for the HTTP port: one request per connection.

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// An HTTP answer: status code, headers block and body.
#[derive(Debug)]
pub struct HttpAnswer {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

/// Sends `method path` with an optional body and reads the whole answer.
pub async fn send(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> HttpAnswer {
    send_from(None, addr, method, path, &[], body).await
}

/// [`send`] from the loopback address `from` (e.g. 127.0.0.2, to be outside
/// a trusted 127.0.0.1/32), with extra `headers`.
pub async fn send_from(
    from: Option<std::net::IpAddr>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> HttpAnswer {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .unwrap();
    if let Some(ip) = from {
        socket.bind(SocketAddr::new(ip, 0)).unwrap();
    }
    let mut stream = socket.connect(addr).await.unwrap();
    let body = body.unwrap_or("");
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    HttpAnswer {
        status,
        headers: head.to_owned(),
        body: body.to_owned(),
    }
}

/// `GET path`.
pub async fn get(addr: SocketAddr, path: &str) -> HttpAnswer {
    send(addr, "GET", path, None).await
}

/// `POST path` with a JSON body.
pub async fn post_json(addr: SocketAddr, path: &str, body: &str) -> HttpAnswer {
    send(addr, "POST", path, Some(body)).await
}

/// `GET path` without a runtime (for tests that drive a child process from
/// a plain thread): the whole raw answer.
///
/// # Errors
///
/// When the port does not answer.
pub fn get_blocking(port: u16, path: &str) -> std::io::Result<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}
