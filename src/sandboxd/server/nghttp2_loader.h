// libnghttp2, loaded on the first HTTP/2 connection (dlopen) instead of
// linked: the daemon starts in every sandbox and most never see a gRPC
// client, so its start loads one library fewer (issue 23 counts them), the
// way fs/archive_loader.h loads libarchive. The k8s bundle carries the
// library (deploy/k8s/bundle-sandboxd.sh). Headers only at build time.
#pragma once

#include <nghttp2/nghttp2.h>

#include <string_view>

#include "common/error.h"

namespace deepbox::sandboxd {

#define DEEPBOX_NGHTTP2_FUNCS(X)                               \
  X(nghttp2_session_callbacks_new)                             \
  X(nghttp2_session_callbacks_del)                             \
  X(nghttp2_session_callbacks_set_on_begin_headers_callback)   \
  X(nghttp2_session_callbacks_set_on_header_callback)          \
  X(nghttp2_session_callbacks_set_on_frame_recv_callback)      \
  X(nghttp2_session_callbacks_set_on_data_chunk_recv_callback) \
  X(nghttp2_session_callbacks_set_on_stream_close_callback)    \
  X(nghttp2_session_callbacks_set_on_frame_send_callback)      \
  X(nghttp2_session_server_new)                                \
  X(nghttp2_session_del)                                       \
  X(nghttp2_session_mem_recv)                                  \
  X(nghttp2_session_mem_send)                                  \
  X(nghttp2_session_want_read)                                 \
  X(nghttp2_session_want_write)                                \
  X(nghttp2_session_get_last_proc_stream_id)                   \
  X(nghttp2_session_terminate_session)                         \
  X(nghttp2_submit_settings)                                   \
  X(nghttp2_submit_response)                                   \
  X(nghttp2_submit_trailer)                                    \
  X(nghttp2_submit_rst_stream)                                 \
  X(nghttp2_submit_goaway)                                     \
  X(nghttp2_strerror)

struct LibNghttp2 {
#define DEEPBOX_NGHTTP2_DECLARE(name) decltype(&::name) name = nullptr;
  DEEPBOX_NGHTTP2_FUNCS(DEEPBOX_NGHTTP2_DECLARE)
#undef DEEPBOX_NGHTTP2_DECLARE
};

// The functions, loaded once; UNAVAILABLE ("<purpose> needs libnghttp2: ...")
// when libnghttp2.so.14 or one of them is missing.
Result<const LibNghttp2*> LoadLibNghttp2(std::string_view purpose);

}  // namespace deepbox::sandboxd
