// A real TLS ClientHello, the bytes OpenSSL's client writes first, for tests and fuzz targets that
// feed the server's TLS detection a genuine hello (or garbage behind one). gtest-free.
#pragma once

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <string>

namespace rrpc::rpc {

// The ClientHello of a fresh client on `ctx` (the context's versions and suites go in it).
inline std::string MakeClientHello(SSL_CTX* ctx) {
  SSL* ssl = SSL_new(ctx);
  BIO* rbio = BIO_new(BIO_s_mem());
  BIO* wbio = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, rbio, wbio);  // ssl owns both
  SSL_set_connect_state(ssl);
  SSL_do_handshake(ssl);  // writes the hello, then wants the server's answer
  char* data = nullptr;
  const long n = BIO_get_mem_data(wbio, &data);
  std::string hello(data, static_cast<size_t>(n));
  SSL_free(ssl);
  return hello;
}

// The same with OpenSSL's default client settings.
inline std::string MakeClientHello() {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  std::string hello = MakeClientHello(ctx);
  SSL_CTX_free(ctx);
  return hello;
}

}  // namespace rrpc::rpc
