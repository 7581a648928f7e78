// Every code crosses both ways unchanged; out-of-range codes become UNKNOWN.
#include "proto/grpc_status.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(GrpcStatus, EveryCodeRoundTrips) {
  for (int c = 1; c <= 16; ++c) {
    const absl::Status a(static_cast<absl::StatusCode>(c), "msg");
    const grpc::Status g = ToGrpcStatus(a);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    EXPECT_EQ(g.error_message(), "msg");
    EXPECT_EQ(FromGrpcStatus(g), a);
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "ctx").ok());
}

TEST(GrpcStatus, NamedCodesAndContext) {
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("x")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"), "Step on h:1"),
            absl::UnavailableError("Step on h:1: down"));
}

TEST(GrpcStatus, UnknownCodesBecomeUnknown) {
  EXPECT_EQ(ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(42), "odd")).error_code(),
            grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(99), "odd")).code(),
            absl::StatusCode::kUnknown);
}

}  // namespace
}  // namespace tandem
